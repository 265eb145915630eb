//! The CPU time slice `flowmem serve` asks Linux for.
//!
//! Linux's scheduler (EEVDF, 6.6 and later) gives each thread a deadline one time
//! slice after it becomes eligible to run, and a woken thread takes the CPU from the
//! running one when its deadline is earlier. A thread with a short slice that a request
//! wakes therefore runs sooner on a busy machine, for the same share of the CPU: it is
//! the kernel's knob for latency-sensitive work, set per thread with `sched_setattr`
//! (`sched_runtime` under `SCHED_OTHER`, 0.1 to 100 ms, since Linux 6.12; earlier kernels
//! ignore it). Threads inherit it from the thread that creates them, and so do child
//! processes.
#![allow(unsafe_code)]

use std::io;

/// Sets the time slice of every thread of this process that runs under the normal
/// policies to `micros` µs (0: the kernel's default) and returns how many it set;
/// threads under a real-time or idle policy someone chose are left alone. Threads
/// created later inherit the slice of their creator.
///
/// # Errors
///
/// The error of `/proc/self/task` or of the first failing `sched_getattr` or
/// `sched_setattr` (a thread that exited meanwhile is skipped).
pub(crate) fn set_time_slice(micros: u64) -> io::Result<usize> {
    let mut set = 0;
    for entry in std::fs::read_dir("/proc/self/task")? {
        let Some(tid) = entry?.file_name().to_str().and_then(|name| name.parse::<libc::pid_t>().ok()) else {
            continue;
        };
        let mut attr = libc::sched_attr {
            size: 0,
            sched_policy: 0,
            sched_flags: 0,
            sched_nice: 0,
            sched_priority: 0,
            sched_runtime: 0,
            sched_deadline: 0,
            sched_period: 0,
        };
        let size = size_of::<libc::sched_attr>() as u32;
        // SAFETY: `attr` is a `sched_attr` of the size passed, which the kernel fills.
        let got = unsafe { libc::syscall(libc::SYS_sched_getattr, tid, &raw mut attr, size, 0u32) };
        if !succeeded(got)? {
            continue;
        }
        if ![libc::SCHED_OTHER, libc::SCHED_BATCH].contains(&(attr.sched_policy as i32)) {
            continue;
        }
        attr.size = size;
        attr.sched_runtime = micros * 1_000;
        // SAFETY: `attr` is a complete `sched_attr` whose `size` says how big it is; the
        // kernel only reads it.
        let done = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &raw const attr, 0u32) };
        if !succeeded(done)? {
            continue;
        }
        set += 1;
    }
    Ok(set)
}

/// Whether a system call that returned `ret` succeeded: `Ok(false)` when its thread was
/// gone (it exited meanwhile), its error otherwise.
fn succeeded(ret: libc::c_long) -> io::Result<bool> {
    if ret == 0 {
        return Ok(true);
    }
    match io::Error::last_os_error() {
        err if err.raw_os_error() == Some(libc::ESRCH) => Ok(false),
        err => Err(err),
    }
}
