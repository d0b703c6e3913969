// Package imagecache serves the node's image cache to coordinators
// (NodeAgentService's ListImages, RemoveImage and PruneImages) over the
// drivers that keep images (drivers.ImageCache), and measures it for the
// agent's metrics.
package imagecache

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"corpus/drivers"
	"corpus/internal/metrics"
	corpusv1 "corpus/proto/corpus/v1"
)

// Images serves the image procedures of the agent's API; the caller is
// checked before.
type Images struct {
	// Name is the node's name, put in every image it answers with.
	Name string
	// Drivers are the node's running drivers by name; those that are
	// drivers.ImageCache are asked.
	Drivers map[string]drivers.Driver
}

// caches returns the drivers that keep images, by name.
func (n Images) caches() ([]string, map[string]drivers.ImageCache) {
	out := map[string]drivers.ImageCache{}
	var names []string
	for name, d := range n.Drivers {
		if c, ok := d.(drivers.ImageCache); ok {
			out[name] = c
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, out
}

// ListImages lists every image the node's drivers keep.
func (n Images) ListImages(ctx context.Context, _ *connect.Request[corpusv1.ListImagesRequest]) (*connect.Response[corpusv1.ListImagesResponse], error) {
	names, caches := n.caches()
	res := &corpusv1.ListImagesResponse{}
	usage := &corpusv1.ImageCacheUsage{Node: n.Name}
	for _, name := range names {
		imgs, u, err := caches[name].Images(ctx)
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("listing the %s driver's images: %w", name, err))
		}
		for _, img := range imgs {
			res.Images = append(res.Images, n.view(name, img))
		}
		usage.Bytes += u.Bytes
		usage.Images += int32(u.Images)
	}
	res.Usage = []*corpusv1.ImageCacheUsage{usage}
	return connect.NewResponse(res), nil
}

// RemoveImage removes the image from the driver whose cache has it.
func (n Images) RemoveImage(ctx context.Context, req *connect.Request[corpusv1.RemoveImageRequest]) (*connect.Response[corpusv1.RemoveImageResponse], error) {
	if req.Msg.Image == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no image named: give its name, reference or digest (corpus image list)"))
	}
	names, caches := n.caches()
	for _, name := range names {
		img, freed, err := caches[name].RemoveImage(ctx, req.Msg.Image)
		switch {
		case errors.Is(err, drivers.ErrImageNotCached):
			continue
		case errors.Is(err, drivers.ErrImageInUse):
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("node %s: %w", n.Name, err))
		case errors.Is(err, drivers.ErrImageAmbiguous):
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("node %s: %w", n.Name, err))
		case err != nil:
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("node %s: %w", n.Name, err))
		}
		return connect.NewResponse(&corpusv1.RemoveImageResponse{Image: n.view(name, img), FreedBytes: freed}), nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("node %s has no image %q in its cache (see corpus image list --node %s)", n.Name, req.Msg.Image, n.Name))
}

// PruneImages removes every image no guest uses from every driver.
func (n Images) PruneImages(ctx context.Context, _ *connect.Request[corpusv1.PruneImagesRequest]) (*connect.Response[corpusv1.PruneImagesResponse], error) {
	names, caches := n.caches()
	res := &corpusv1.PruneImagesResponse{}
	for _, name := range names {
		imgs, freed, err := caches[name].PruneImages(ctx)
		for _, img := range imgs {
			res.Removed = append(res.Removed, n.view(name, img))
		}
		res.FreedBytes += freed
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("node %s: pruning the %s driver's images: %w", n.Name, name, err))
		}
	}
	return connect.NewResponse(res), nil
}

func (n Images) view(driver string, img drivers.CachedImage) *corpusv1.CachedImage {
	v := &corpusv1.CachedImage{
		Node: n.Name, Driver: driver, Id: img.ID, Name: img.Name, Digest: img.Digest,
		SizeBytes: img.SizeBytes, SharedBytes: img.SharedBytes, Guests: img.Guests,
	}
	if !img.LastUsed.IsZero() {
		v.LastUsed = timestamppb.New(img.LastUsed)
	}
	return v
}

// Collector exposes the image cache of each driver that keeps one:
// corpus_image_cache_bytes and corpus_image_cache_images, labelled by
// driver, as last measured (after each pull, build, list or removal).
func Collector(n Images) prometheus.Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metrics.Namespace, "image_cache", name), help, []string{"driver"}, nil)
	}
	return &collector{n: n,
		bytes:  d("bytes", "Bytes the node's image cache takes on disk, layers shared between images counted once."),
		images: d("images", "Images in the node's image cache."),
	}
}

type collector struct {
	n             Images
	bytes, images *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.bytes; ch <- c.images }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	names, caches := c.n.caches()
	for _, name := range names {
		u := caches[name].ImageCacheUsage()
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(u.Bytes), name)
		ch <- prometheus.MustNewConstMetric(c.images, prometheus.GaugeValue, float64(u.Images), name)
	}
}
