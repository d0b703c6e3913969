package admission

import (
	"encoding/json"

	"github.com/google/go-containerregistry/pkg/name"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"corpus/internal/imageref"
	corpusv1 "corpus/proto/corpus/v1"
)

// Image is the AdmissionImage of reference ref: its registry and
// repository, and its digest when ref names one, else digest (a
// release's recorded one; "" for a tag not pulled yet). It is nil when
// ref is not an OCI reference (a built image's name).
func Image(ref, digest string) *corpusv1.AdmissionImage {
	r, err := imageref.Parse(ref, false)
	if err != nil {
		return nil
	}
	if d, ok := r.(name.Digest); ok {
		digest = d.DigestStr()
	}
	return &corpusv1.AdmissionImage{Reference: ref, Registry: r.Context().RegistryStr(), Repository: r.Context().RepositoryStr(), Digest: digest}
}

// imageOf is the image a request about to be written would run, nil
// when it names none: a guest's (made or changed), a project's, an
// image deploy's.
func imageOf(obj proto.Message) *corpusv1.AdmissionImage {
	switch m := obj.(type) {
	case *corpusv1.CreateGuestRequest:
		return Image(m.GetSpec().GetImage(), "")
	case *corpusv1.UpdateGuest:
		return Image(m.GetSpec().GetImage(), "")
	case *corpusv1.CreateProjectRequest:
		return Image(m.GetImage(), "")
	case *corpusv1.RedeployRequest:
		return Image(m.GetImage(), "")
	}
	return nil
}

// imageJSON is img as a call's "image", nil when there is none.
func imageJSON(img *corpusv1.AdmissionImage) json.RawMessage {
	if img == nil {
		return nil
	}
	b, _ := protojson.Marshal(img)
	return b
}
