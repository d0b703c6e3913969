// Package netns owns the links of guest networking on a node: the bridge
// guests attach to, the bridge's gateway address, IPv4 forwarding, and the
// veth pairs that join guests to the bridge. Sub-package nat owns the NAT
// rules in front of them, l2filter the filter that holds each guest's
// bridge port to the guest's MAC and address.
//
// Every call works on the network namespace of the calling OS thread. The
// agent calls it from the node's own namespace; code that switches a thread
// into another namespace (tests do) must hold runtime.LockOSThread across
// the switch and the call.
//
// The Ensure calls are level-based: each reads the links as they are,
// changes only what differs from what corpus wants, reports what it changed,
// and does nothing on a host that is already right, so a reconcile loop can
// call them every round and a bridge deleted by hand is recreated on the
// next. Delete calls succeed when there is nothing to delete, so they can be
// registered as undo hooks with corpus/internal/revert:
//
//	r := revert.New()
//	defer r.Fail()
//	changes, err := host.EnsureBridge(ctx, br)
//	if err != nil {
//		return err
//	}
//	if changes.Created {
//		r.Add(func() { host.DeleteBridge(ctx, br.Name) })
//	}
//	created, err := host.EnsureVeth(ctx, veth)
//	...
//	r.Success()
//
// Only IPv4 is handled.
package netns
