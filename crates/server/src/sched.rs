//! What `flowmem serve`'s threads ask of Linux's scheduler: short time slices for the
//! threads that answer requests, and no preemption by the ones that work in the
//! background.
//!
//! Linux's scheduler (EEVDF, 6.6 and later) gives each thread a deadline one time
//! slice after it becomes eligible to run, and a woken thread takes the CPU from the
//! running one when its deadline is earlier. A thread with a short slice that a request
//! wakes therefore runs sooner on a busy machine, for the same share of the CPU: it is
//! the kernel's knob for latency-sensitive work, set per thread with `sched_setattr`
//! (`sched_runtime` under `SCHED_OTHER`, 0.1 to 100 ms, since Linux 6.12; earlier kernels
//! ignore it). Threads inherit it from the thread that creates them, and so do child
//! processes.
//!
//! Background work that wakes often, such as the learning queue's writer storing a
//! batch of turns every few milliseconds, runs under `SCHED_BATCH` (`in_background`):
//! a woken batch thread never takes the CPU from a running one, and waits for the next
//! tick or a free CPU instead, with the same share of the CPU over time. Under
//! `SCHED_OTHER` the writer preempted whichever thread was running when it woke, and
//! that thread then waited for the writer's batch, milliseconds, with the other CPU idle
//! (a scheduler trace is in `bench/runs/2026-12-07-vm/gateway_batch_writer.txt`).
#![allow(unsafe_code)]

/// Runs `work` on the calling thread under `SCHED_BATCH` (keeping its time slice), then
/// puts the thread's policy back; for background work on a pool thread that requests
/// also use. A thread under a policy other than `SCHED_OTHER`, or one whose policy
/// cannot be read or changed, runs `work` as it is, and so does every thread on systems
/// other than Linux.
pub(crate) fn in_background<T>(work: impl FnOnce() -> T) -> T {
    #[cfg(target_os = "linux")]
    let _restore = linux::as_batch();
    work()
}

#[cfg(target_os = "linux")]
pub use self::linux::set_time_slice;

/// The system calls, which only Linux has.
#[cfg(target_os = "linux")]
mod linux {
    use std::io;

    /// A thread's scheduling attributes, or `None` when the thread is gone.
    fn attributes(tid: libc::pid_t) -> io::Result<Option<libc::sched_attr>> {
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
        Ok(succeeded(got)?.then_some(attr))
    }

    /// Sets a thread's scheduling attributes; false when the thread is gone.
    fn set_attributes(tid: libc::pid_t, mut attr: libc::sched_attr) -> io::Result<bool> {
        attr.size = size_of::<libc::sched_attr>() as u32;
        // SAFETY: `attr` is a complete `sched_attr` whose `size` says how big it is; the
        // kernel only reads it.
        let done = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &raw const attr, 0u32) };
        succeeded(done)
    }

    /// Whether a thread runs under a normal policy, which this module may change; threads
    /// under a real-time or idle policy someone chose are left alone.
    fn normal(attr: &libc::sched_attr) -> bool {
        [libc::SCHED_OTHER, libc::SCHED_BATCH].contains(&(attr.sched_policy as i32))
    }

    /// Sets the time slice of every thread of this process that runs under the normal
    /// policies to `micros` µs (0: the kernel's default) and returns how many it set.
    /// Threads created later inherit the slice of their creator.
    ///
    /// # Errors
    ///
    /// The error of `/proc/self/task` or of the first failing `sched_getattr` or
    /// `sched_setattr` (a thread that exited meanwhile is skipped).
    pub fn set_time_slice(micros: u64) -> io::Result<usize> {
        let mut set = 0;
        for entry in std::fs::read_dir("/proc/self/task")? {
            let Some(tid) = entry?.file_name().to_str().and_then(|name| name.parse::<libc::pid_t>().ok()) else {
                continue;
            };
            let Some(mut attr) = attributes(tid)?.filter(normal) else { continue };
            attr.sched_runtime = micros * 1_000;
            if set_attributes(tid, attr)? {
                set += 1;
            }
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

    /// Puts the calling thread under `SCHED_BATCH`, if it is under `SCHED_OTHER`, until
    /// the returned guard is dropped.
    pub(super) fn as_batch() -> Restore {
        let before = attributes(0).ok().flatten().filter(|attr| attr.sched_policy == libc::SCHED_OTHER as u32);
        Restore(before.and_then(|attr| {
            let batch = libc::sched_attr { sched_policy: libc::SCHED_BATCH as u32, ..attr };
            set_attributes(0, batch).ok().filter(|set| *set).map(|_| attr)
        }))
    }

    /// Puts a thread's attributes back when dropped, also when its work panicked.
    pub(super) struct Restore(Option<libc::sched_attr>);

    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(attr) = self.0.take()
                && let Err(err) = set_attributes(0, attr)
            {
                tracing::debug!("could not restore a background thread's scheduling policy: {err}");
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::sched::in_background;

        /// Work in the background runs under `SCHED_BATCH` with the thread's time slice,
        /// and the thread is back under `SCHED_OTHER` afterwards, also after a panic.
        #[test]
        fn background_work_runs_as_a_batch_and_the_thread_gets_its_policy_back() {
            std::thread::spawn(|| {
                let mut attr = attributes(0).unwrap().unwrap();
                assert_eq!(attr.sched_policy, libc::SCHED_OTHER as u32, "a fresh thread's policy");
                attr.sched_runtime = 2_000_000;
                assert!(set_attributes(0, attr).unwrap());
                let inside = in_background(|| attributes(0).unwrap().unwrap());
                assert_eq!(inside.sched_policy, libc::SCHED_BATCH as u32);
                assert_eq!(inside.sched_runtime, 2_000_000, "the slice is kept");
                let after = attributes(0).unwrap().unwrap();
                assert_eq!((after.sched_policy, after.sched_runtime), (libc::SCHED_OTHER as u32, 2_000_000));
                let panicked = std::panic::catch_unwind(|| in_background(|| panic!("the work failed")));
                assert!(panicked.is_err());
                assert_eq!(attributes(0).unwrap().unwrap().sched_policy, libc::SCHED_OTHER as u32, "after a panic");
            })
            .join()
            .unwrap();
        }
    }
}
