package kubernetes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"corpus/drivers"
)

var _ drivers.VolumeKeeper = (*Driver)(nil)

// ObserveVolume reports the claim of the named volume: ready once bound,
// with the bound capacity (else the requested size). A claim that is
// not corpus's volume is ErrNotFound.
func (d *Driver) ObserveVolume(ctx context.Context, name string) (drivers.VolumeStatus, error) {
	v, err := d.view(ctx)
	if err != nil {
		return drivers.VolumeStatus{}, err
	}
	c, err := v.claims.Get(name)
	if apierrors.IsNotFound(err) || err == nil && c.Labels[LabelVolume] != name {
		return drivers.VolumeStatus{}, fmt.Errorf("claim %s/%s: %w", d.ns, name, drivers.ErrNotFound)
	}
	if err != nil {
		return drivers.VolumeStatus{}, err
	}
	st := drivers.VolumeStatus{SizeBytes: c.Spec.Resources.Requests.Storage().Value()}
	if c.Status.Phase == corev1.ClaimBound {
		st.Ready = true
		if q, ok := c.Status.Capacity[corev1.ResourceStorage]; ok {
			st.SizeBytes = q.Value()
		}
		return st, nil
	}
	st.Message = fmt.Sprintf("claim %s/%s %s", d.ns, name, c.Status.Phase)
	return st, nil
}

// DeleteVolume deletes the claim of the named volume, when it is
// corpus's; the storage class's reclaim policy decides what becomes of
// the data. A claim a pod still uses stays until that pod is gone.
func (d *Driver) DeleteVolume(ctx context.Context, name string) error {
	api := d.client.CoreV1().PersistentVolumeClaims(d.ns)
	c, err := api.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading claim %s: %w", name, err)
	}
	if c.Labels[LabelManagedBy] != managedBy || c.Labels[LabelVolume] != name {
		return fmt.Errorf("claim %s/%s is not corpus's volume %s: %w", d.ns, name, name, drivers.ErrExists)
	}
	err = api.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &c.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting claim %s: %w", name, err)
	}
	d.logger.Info("claim deleted", "namespace", d.ns, "volume", name)
	return nil
}
