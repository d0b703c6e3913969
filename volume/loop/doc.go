// Package loop is the default volume backend: one sparse ext4 image per
// volume, NAME.img under a root folder the agent owns (such as
// /var/lib/corpus/agent/volumes), attached through a loop device and
// mounted with noatime and without online discard. It works on any Linux
// host with ext4 tools (mkfs.ext4, e2fsck, resize2fs, e2label).
//
// The host is the state: which loop device backs an image is found by
// scanning /sys/block/loop*/loop/backing_file and matching the image's
// inode, and mounts are read from /proc/self/mountinfo, so a new Backend
// over the same root (an agent restart) finds the devices and mounts an
// earlier one made instead of making new ones. Loop devices are made with
// LOOP_CONFIGURE through /dev/loop-control, autoclear off, so they survive
// the agent.
//
// Images are sparse: a volume takes host space only for blocks written,
// and Trim (FITRIM on the mounted file system) punches the freed blocks
// back out of the image. Host space is not reserved; a host that runs out
// of space turns guest writes into I/O errors, so the agent must watch the
// host's free space against the sum of SizeBytes.
//
// Operations on one volume are serialized within a Backend; two Backends
// (two processes) over the same root are not coordinated.
package loop
