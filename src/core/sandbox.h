#pragma once
/// The sandbox of candidate processes (runners and the Python worker), applied in the child between
/// fork and exec with what the kernel offers, each part independent of the others:
///
///   writes   Landlock: files may be written, created, removed or renamed only beneath one folder (the
///            runner's), the device nodes a GPU or the C library needs, and /dev/shm (a private tmpfs
///            when the child has its own mount namespace). Reading stays open.
///   network  a network namespace of its own (no interface but a loopback that is down), Landlock's TCP
///            rules where the kernel has them, and a seccomp rule: socket() of any family but AF_UNIX
///            fails with EACCES, io_uring (which opens sockets past seccomp) with ENOSYS.
///   signals  Landlock's signal scope (kernel 6.12+), and with `confine_signals` a seccomp rule that
///            keeps kill(), tgkill() and friends to the child's own process and group.
///   processes with `deny_processes`, fork, vfork and clone of anything but a thread fail with EPERM
///            (a fork bomb stops at its first fork); `allow_spawn` keeps posix_spawn (PoCL runs its
///            linker so); with `confine_signals`, setsid and setpgid fail too, so that everything
///            started stays in the group kfab kills.
///   privilege capabilities dropped from the bounding set (root keeps none across exec); ptrace,
///            process_vm_*, mount, clock and module system calls, reboot and bpf fail with EPERM.
///
/// What the kernel refuses is skipped (a container without namespaces, a kernel without Landlock) and
/// said on the child's stderr; with KFAB_SANDBOX=require, a missing part fails the start instead, and
/// KFAB_SANDBOX=off turns the sandbox off (for debugging a candidate). KFAB_SANDBOX_SKIP leaves parts
/// out, by name, comma-separated: net, mounts, landlock, caps, seccomp.

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace kfab {

struct SandboxPolicy {
  bool enabled = false;
  std::filesystem::path writable_dir;  ///< the one folder the child may write in
  bool confine_signals = false;
  bool deny_processes = false;
  bool allow_spawn = false;  ///< with deny_processes: posix_spawn (clone with CLONE_VM | CLONE_VFORK) stays
  /// perf_event_open stays (kfab eval --profile on the CPU: the runner counts its own calls)
  bool perf_events = false;
};

/// What this kernel and these privileges allow, found by trying each part in a throwaway child.
struct SandboxSupport {
  int landlock_abi = 0;       ///< 0: no Landlock
  bool seccomp = false;
  bool net_namespace = false;
  bool mount_namespace = false;
  /// "landlock ABI 7, network namespace, mount namespace, seccomp"; or what is missing
  std::string describe() const;
};
SandboxSupport probe_sandbox();

/// KFAB_SANDBOX: "off", "require" or unset (best effort).
enum class SandboxMode { Off, BestEffort, Require };
SandboxMode sandbox_mode();

/// A policy prepared before fork, so that the child only makes async-signal-safe calls.
class SandboxPlan {
 public:
  SandboxPlan() = default;
  explicit SandboxPlan(const SandboxPolicy& p);
  bool active() const { return active_; }
  /// In the child, after fork and before exec. Writes one line on fd 2 saying what applied. Returns 0,
  /// or (with KFAB_SANDBOX=require) the errno of the part that could not be applied.
  int apply_in_child() const noexcept;

 private:
  bool active_ = false;
  bool require_ = false;
  /// KFAB_SANDBOX_SKIP: parts left out, for finding which one a driver or library cannot live with.
  bool skip_net_ = false, skip_mounts_ = false, skip_landlock_ = false, skip_caps_ = false, skip_seccomp_ = false, skip_scopes_ = false;
  std::vector<std::string> extra_writable_;  ///< KFAB_SANDBOX_ALLOW: more folders it may write in
  SandboxPolicy policy_;
  std::string writable_;
  std::vector<std::string> device_files_;  ///< /dev nodes opened for writing by drivers and libc
};

}  // namespace kfab
