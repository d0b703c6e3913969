// Package libvirt runs corpus guests as KVM/QEMU virtual machines managed
// by libvirtd, spoken to over its socket with the pure-Go
// github.com/digitalocean/go-libvirt client.
//
// Every guest is a persistent libvirt domain named after the guest. Its
// domain XML is generated from the typed description in domainxml.go and
// carries, in its <metadata>, corpus's guest id, the image and the driver
// instance that owns it; List returns only domains whose instance matches,
// so several agents may share one libvirtd and an agent that restarts
// finds its VMs again. The driver instance owns one folder, which QEMU
// (running as libvirt's user) must be able to reach:
//
//	<Dir>/                    default /var/lib/libvirt/images/corpus/agent-<hash>
//	  guests/web/disk.qcow2   the guest's root disk, a copy-on-write
//	                          overlay on its image's base disk
//	  guests/web/console.log  its serial console
//	  guests/web/volumes/db   device node of volume db's loop device
//	<ImageDir>/               shared by the host's agents, one build at a time
//	  debian-bookworm-r4/     disk.raw (sparse ext4), vmlinuz, initrd.img,
//	                          image.json (written when complete)
//
// VMs boot their image's kernel directly. The guest's static address,
// gateway and resolvers travel on the kernel command line (corpus.ip=,
// corpus.gw=, corpus.dns=, corpus.search=, corpus.mac=); a small unit baked
// into every corpus image applies them before the network is up, so no
// cloud-init or DHCP is involved. The guest's NIC is a tap device that the
// driver puts on the agent's bridge itself after the domain starts,
// moving it first into the agent's network namespace when libvirtd runs
// in another one (as in the end-to-end tests, where each node is a
// namespace).
//
// Exec goes through the QEMU guest agent (guest-exec, guest-exec-status),
// so it needs a running guest whose agent answers; its output is
// delivered when the command ends.
//
// A guest's life is the one of drivers.Driver:
//
//	        Create            Start
//	(none) ────────▶ stopped ───────▶ running ─┐
//	  ▲                 │   ◀───────     │  ▲  │ Exec
//	  │                 │     Stop       │  └──┘
//	  └──── Destroy ────┴────────────────┘
//
// Volumes are virtio disks (Capabilities.Volumes BlockVolumes). The agent keeps
// each volume as an ext4 image on a loop device in its own state folder
// (root only); the driver makes a block device node of that loop
// device's numbers in the guest's folder (guests/web/volumes/SERIAL),
// which QEMU opens as a <disk type='block'>, so QEMU reaches the volume
// without entering the agent's folder and the domain's definition stays
// the same when the host numbers its loop devices anew (AttachVolume
// makes the node again before a start). The disk's serial is the volume's
// name (cut and hashed past 20 bytes); corpus.vol=SERIAL:PATH on the
// kernel command line has the image's corpus-volumes unit mount
// /dev/disk/by-id/virtio-SERIAL at PATH and grow its file system to the
// disk. GrowVolume grows a volume while the VM runs: a block resize,
// then resize2fs inside the guest through the guest agent. Host folders
// (drivers.GuestSpec.Mounts) are refused: its volume mode is BlockVolumes.
package libvirt
