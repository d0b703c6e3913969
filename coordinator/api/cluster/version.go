package cluster

import "corpus/internal/version"

func versionString() string { return version.Version }
