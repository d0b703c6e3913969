// Package volume is the contract between the node agent and the storage
// that holds a guest's persistent data: a volume is a named, sized file
// system that outlives the guests that use it.
//
// A Backend creates, attaches, mounts, grows, shrinks, trims and deletes
// volumes; what it can do is data (Capabilities), so callers never switch on
// a backend's name. Backends live in sub-packages: loop (a sparse ext4
// image per volume on a loop device, the default, works on any Linux host);
// LVM thin, ZFS and btrfs backends can sit behind the same interface.
// Abilities not every backend has are separate interfaces found by type
// assertion (Mover for Export and Import).
//
// A volume's life on a node:
//
//	          Create                Attach               Mount
//	(none) ─────────► created ─────────────► attached ──────────► mounted
//	   ▲                │  ▲                 │  ▲                 │
//	   └──── Delete ────┘  └───── Detach ────┘  └──── Unmount ────┘
//
//	Grow:   created, attached or mounted (online: the mounted file system
//	        sees the new size at once).
//	Shrink: created or attached, never mounted (ErrInUse); refused with
//	        ErrCannotShrink, nothing changed, below used + ShrinkMargin or
//	        without the allowShrink opt-in.
//	Trim:   attached or mounted; hands free blocks back to the host.
//
// Every operation is idempotent and re-runnable: a reconciler that was
// killed half-way through calls the same operation again and the volume
// ends at the size asked for; Stat reports the image and file-system sizes
// separately so a half-finished grow or shrink can be seen.
//
// Sizes are multiples of Align: NormalizeSize makes one from what people
// ask for (the API applies it), and backends take sizes exactly as given
// (CheckSize), so a volume is the size its desired state says. Gate
// decides, before a reconciler stops anything, whether a resize is to be
// tried at all, and remembers the ones it refused.
//
// Errors wrap the sentinels in errors.go; use errors.Is.
package volume
