// Package gpu decides which GPUs a trainer sees and how much of their memory
// Paddle may take, and watches that memory. It starts no process and no
// goroutine of its own: cmd/ wires it into lifeboat run and runs
// Watchdog.Run.
//
// # Device visibility
//
// ParseDevices reads what the container was given, NVIDIA_VISIBLE_DEVICES
// ("all", "none", "void", "", indices, "gpu:mig" indices, GPU-<uuid>,
// MIG-<uuid>, MIG-GPU-<uuid>/<gi>/<ci>), or a --gpus value (the same syntax,
// or docker's device=/count= form), into a Request. Inspect asks NVML, through
// the package's small Driver interface, what it sees: per GPU its index,
// UUID, name, memory, MIG mode and MIG devices. Plan turns both into the
// trainer's environment (Visibility.Env):
//
//   - CUDA_VISIBLE_DEVICES lists the devices in the request's order and
//     FLAGS_selected_gpus is 0..n-1, because Paddle numbers devices relative to
//     CUDA_VISIBLE_DEVICES. Checked against NVML, devices are named by UUID,
//     which survives the runtime's renumbering and any CUDA_DEVICE_ORDER;
//     where an index is written, CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA's
//     order NVML's (nvidia-smi's).
//   - Request.Applied (set by the caller for NVIDIA_VISIBLE_DEVICES, not for
//     --gpus) says the runtime has already applied the request, so the
//     container sees those GPUs renumbered from 0: "2,3" becomes the
//     container's 0 and 1.
//   - MIG: CUDA accepts a MIG device only by its MIG UUID, and enumerates only
//     one MIG device per process. Paddle, given a MIG UUID it cannot parse as
//     a card, falls back to card 0; so Plan sets CUDA_VISIBLE_DEVICES=MIG-<uuid>
//     and FLAGS_selected_gpus=0, and CUDA's device 0, Paddle's card 0, is then
//     exactly that instance. NVIDIA_VISIBLE_DEVICES is left as the runtime set
//     it. Several devices with a MIG device among them is an error
//     (ErrMultipleMIG) that says to run one trainer per MIG device; a whole
//     MIG-enabled GPU stands for its MIG device when it has exactly one.
//   - A requested device NVML does not see is an error (ErrDeviceNotFound)
//     naming it and listing what NVML sees.
//   - Without NVML (ErrNoNVML: no libnvidia-ml, no driver, or a binary built
//     without cgo) the caller logs one line and calls Plan with a nil
//     Inventory: the plan is made from the request as given, unverified, with
//     Visibility.Checked false and Notes saying what was assumed. That is not
//     an error. "all" then leaves CUDA_VISIBLE_DEVICES unset.
//
// Resolve puts these together for lifeboat run and doctor: which request
// counts (the caller's Options.Devices, else NVIDIA_VISIBLE_DEVICES;
// nothing where CUDA_VISIBLE_DEVICES is already set and Devices is not),
// what NVML sees, and Paddle's pool limit below, into a Setup. Its user
// errors are a *FieldError naming the field of Options, which the caller
// names as its user gave it (a flag, a variable).
//
// # Paddle's memory pool
//
// MemoryPlan (and PlanPool, which also returns the limit) turns --gpu-memory-limit (MiB, a fraction, or "auto": the
// device's memory, the MIG instance's for MIG, minus the larger of 5% and
// 512 MiB) into FLAGS_gpu_memory_limit_mb, defaults FLAGS_allocator_strategy
// to auto_growth, and keeps FLAGS_fraction_of_gpu_memory_to_use and
// FLAGS_initial_gpu_memory_in_mb from asking for a first chunk above the
// limit. Precedence: the explicit lifeboat flag > the user's FLAGS_ in the
// environment > lifeboat's defaults; every disagreement is returned as a
// conflict sentence for the log. A fraction and "auto" need the device's
// memory, so without NVML they fail with ErrMemoryUnknown; MiB always works.
//
// # Memory watchdog
//
// Measure samples one GPU or MIG device of the trainer's: the memory in use
// on it from NVML's device (or MIG instance) memory info. Inside a
// container NVML reports the host's pids, which match nothing in the
// container's PID namespace, so per-process figures are used only where
// they are verifiably the container's own: NVML lists at least one process
// and every pid it lists is a process of the trainer's tree. A device
// assigned to the container belongs to it, so what is used on it is the
// trainer's (with GPU sharing, time-slicing or MPS, other pods' use counts
// too). Decide is a pure function that, by Policy (warn, term, kill), says
// whether to warn or signal and which pids: the tree's processes on the
// device, or the whole tree; never a pid outside it. Watchdog runs the
// loop: NewWatchdog, then Run in a goroutine of the caller's; cmd/ only
// wires it.
//
// # Build tags
//
// go-nvml needs cgo (its library loader and its mocks alike). Everything that
// imports it is in files tagged cgo (nvml.go, nvml_test.go); parsing,
// planning, memory and watchdog logic are plain Go and build and test with
// CGO_ENABLED=0. Without cgo, Open (nvml_nocgo.go) returns "NVML support not
// compiled in", wrapping ErrNoNVML. The static flavour (FROM scratch,
// sidecars) is built that way: it therefore always
// plans unchecked, from NVIDIA_VISIBLE_DEVICES and --gpus as given, accepts
// --gpu-memory-limit only in MiB, and has no watchdog; lifeboat run refuses
// --gpu-memory-policy term or kill there when a GPU is visible. The gpu flavour (cgo,
// glibc) gets the checks, "auto" and the watchdog; it still
// runs where no driver is installed, since libnvidia-ml is loaded at run time.
package gpu
