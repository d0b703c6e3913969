package libvirt

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A host can offer /dev/kvm and still be no place for KVM guests: a
// nested hypervisor that emulates its guest's guests runs them a
// thousand times slower than the CPU, so a Linux kernel takes hours to
// unpack itself, and QEMU's own emulation (TCG) would boot it in
// seconds. Opening the node proves nothing about that, so kvmSpeed runs
// a few instructions in a throwaway KVM virtual machine and times them.

// The KVM ioctls the probe uses (linux/kvm.h), numbered for x86-64.
const (
	kvmCreateVM            = 0xAE01
	kvmGetVCPUMmapSize     = 0xAE04
	kvmCreateVCPU          = 0xAE41
	kvmSetUserMemoryRegion = 0x4020AE46 // _IOW(KVMIO, 0x46, struct kvm_userspace_memory_region)
	kvmRun                 = 0xAE80
	kvmGetRegs             = 0x8090AE81 // _IOR(KVMIO, 0x81, struct kvm_regs)
	kvmSetRegs             = 0x4090AE82 // _IOW(KVMIO, 0x82, struct kvm_regs)
	kvmGetSregs            = 0x8138AE83 // _IOR(KVMIO, 0x83, struct kvm_sregs)
	kvmSetSregs            = 0x4138AE84 // _IOW(KVMIO, 0x84, struct kvm_sregs)

	kvmExitHLT  = 5
	kvmExitIntr = 10

	sregsSize  = 312 // sizeof(struct kvm_sregs)
	segSize    = 24  // sizeof(struct kvm_segment)
	sregsCR0At = 8*segSize + 2*16
)

type kvmUserMemoryRegion struct {
	Slot, Flags                         uint32
	GuestPhysAddr, MemorySize, UserAddr uint64
}

type kvmRegs struct {
	RAX, RBX, RCX, RDX, RSI, RDI, RSP, RBP uint64
	R8, R9, R10, R11, R12, R13, R14, R15   uint64
	RIP, RFLAGS                            uint64
}

// probeLoops is how many times the probe's loop runs. On a CPU that
// runs its guests natively that takes a millisecond or two; a probe
// that has not finished after probeDeadline ran at under 10 million
// loops (50 million instructions) a second, slower than TCG.
const (
	probeLoops    = 2_000_000
	probeDeadline = 200 * time.Millisecond
	probeCodeAt   = 0x1000
	probeMemory   = 1 << 20
)

// probeCode is 32-bit protected-mode code: a loop of five instructions
// that reads and writes guest memory, then hlt.
func probeCode(loops uint32) []byte {
	return []byte{
		0xb9, byte(loops), byte(loops >> 8), byte(loops >> 16), byte(loops >> 24), // mov ecx, loops
		0x89, 0xca, // loop: mov edx, ecx
		0x81, 0xe2, 0xff, 0xff, 0x00, 0x00, // and edx, 0xffff
		0x01, 0x82, 0x00, 0x00, 0x01, 0x00, // add [edx+0x10000], eax
		0x49,       // dec ecx
		0x75, 0xef, // jnz loop
		0xf4, // hlt
	}
}

var errTooSlow = errors.New("too slow")

// errNotProbed is for other architectures (kvmspeed_linux_other.go).
var errNotProbed = errors.New("KVM's speed is not probed here")

// kvmSpeed runs probeLoops in a KVM virtual machine made through the
// node at path and returns how long they took; errTooSlow when they
// had not finished after deadline.
func kvmSpeed(path string, deadline time.Duration) (time.Duration, error) {
	kvm, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer kvm.Close()
	vmfd, err := ioctl(int(kvm.Fd()), kvmCreateVM, 0)
	if err != nil {
		return 0, fmt.Errorf("creating a virtual machine: %w", err)
	}
	defer unix.Close(vmfd)
	mem, err := unix.Mmap(-1, 0, probeMemory, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(mem)
	copy(mem[probeCodeAt:], probeCode(probeLoops))
	region := kvmUserMemoryRegion{MemorySize: probeMemory, UserAddr: uint64(uintptr(unsafe.Pointer(&mem[0])))}
	if _, err := ioctl(vmfd, kvmSetUserMemoryRegion, uintptr(unsafe.Pointer(&region))); err != nil {
		return 0, fmt.Errorf("giving it memory: %w", err)
	}
	cpu, err := ioctl(vmfd, kvmCreateVCPU, 0)
	if err != nil {
		return 0, fmt.Errorf("creating its CPU: %w", err)
	}
	defer unix.Close(cpu)
	size, err := ioctl(int(kvm.Fd()), kvmGetVCPUMmapSize, 0)
	if err != nil {
		return 0, err
	}
	run, err := unix.Mmap(cpu, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(run)
	if err := flatProtectedMode(cpu); err != nil {
		return 0, err
	}
	regs := kvmRegs{RIP: probeCodeAt, RFLAGS: 2, RAX: 1}
	if _, err := ioctl(cpu, kvmSetRegs, uintptr(unsafe.Pointer(&regs))); err != nil {
		return 0, fmt.Errorf("setting its registers: %w", err)
	}
	took, err := runUntilHalt(cpu, run, deadline)
	if err != nil {
		return took, err
	}
	// The loop ran to its end: ecx counted down to zero and the CPU
	// stopped right after hlt.
	if _, err := ioctl(cpu, kvmGetRegs, uintptr(unsafe.Pointer(&regs))); err != nil {
		return took, err
	}
	if end := uint64(probeCodeAt + len(probeCode(0))); regs.RCX != 0 || regs.RIP != end {
		return took, fmt.Errorf("the test code stopped at %#x with ecx %d, not at %#x with 0", regs.RIP, regs.RCX, end)
	}
	return took, nil
}

// flatProtectedMode puts the vCPU in 32-bit protected mode with flat
// 4 GiB code and data segments, set straight in the segment registers'
// hidden parts (no descriptor table needed).
func flatProtectedMode(cpu int) error {
	var sregs [sregsSize]byte
	if _, err := ioctl(cpu, kvmGetSregs, uintptr(unsafe.Pointer(&sregs[0]))); err != nil {
		return fmt.Errorf("reading its segments: %w", err)
	}
	set := func(i int, selector uint16, typ byte) {
		s := sregs[i*segSize : (i+1)*segSize]
		clear(s)                                          // base 0
		s[8], s[9], s[10], s[11] = 0xff, 0xff, 0xff, 0xff // limit
		s[12], s[13] = byte(selector), byte(selector>>8)
		s[14] = typ
		s[15], s[17], s[18], s[20] = 1, 1, 1, 1 // present, 32-bit, code/data, 4 KiB granular
	}
	set(0, 0x08, 0xb) // cs: execute/read, accessed
	for i := 1; i <= 5; i++ {
		set(i, 0x10, 0x3) // ds, es, fs, gs, ss: read/write, accessed
	}
	*(*uint64)(unsafe.Pointer(&sregs[sregsCR0At])) |= 1 // PE
	if _, err := ioctl(cpu, kvmSetSregs, uintptr(unsafe.Pointer(&sregs[0]))); err != nil {
		return fmt.Errorf("setting its segments: %w", err)
	}
	return nil
}

// runUntilHalt runs the vCPU until it halts. At deadline it signals the
// running thread, which makes KVM_RUN return, and gives up.
func runUntilHalt(cpu int, run []byte, deadline time.Duration) (time.Duration, error) {
	type result struct {
		took time.Duration
		err  error
	}
	var (
		mu       sync.Mutex
		tid      int
		finished bool
		late     = make(chan struct{})
		done     = make(chan result, 1)
	)
	go func() {
		// The thread stays locked: it ends with the goroutine, so a
		// signal sent after finished is set can never reach another.
		runtime.LockOSThread()
		mu.Lock()
		tid = unix.Gettid()
		mu.Unlock()
		start := time.Now()
		r := func() error {
			for {
				_, err := ioctl(cpu, kvmRun, 0)
				select {
				case <-late:
					return errTooSlow
				default:
				}
				if err != nil && err != unix.EINTR {
					return fmt.Errorf("running it: %w", err)
				}
				switch reason := *(*uint32)(unsafe.Pointer(&run[8])); reason {
				case kvmExitHLT:
					return nil
				case kvmExitIntr:
				default:
					if err == nil {
						return fmt.Errorf("it stopped for reason %d (linux/kvm.h KVM_EXIT_*)", reason)
					}
				}
			}
		}()
		mu.Lock()
		finished = true
		mu.Unlock()
		done <- result{time.Since(start), r}
	}()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.took, r.err
	case <-timer.C:
	}
	close(late)
	// SIGURG is the Go runtime's own preemption signal, harmless to it;
	// repeat it in case one lands before the thread enters KVM_RUN.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		mu.Lock()
		if !finished && tid != 0 {
			_ = unix.Tgkill(unix.Getpid(), tid, unix.SIGURG)
		}
		mu.Unlock()
		select {
		case r := <-done:
			return r.took, r.err
		case <-tick.C:
		}
	}
}

func ioctl(fd int, req, arg uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}
