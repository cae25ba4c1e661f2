//! nodegate's heap allocator, chosen in one place.
//!
//! The binary (`src/main.rs`) installs [`Allocator`] as its global
//! allocator and calls [`init`] first thing; the memory examples
//! (`gate_memory`, `open_memory`, `regate_memory`) install the same
//! allocator, [`Counting`] where they report the live heap, so what they
//! measure is what ships.
//!
//! With no feature, the allocator is the one docs/benchmarks.md ("The
//! allocator") chose by measurement. Each feature below puts a candidate in
//! its place, to measure it (`--features nodegate-alloc/jemalloc`); at most
//! one of them at a time:
//!
//! - `system`: glibc's malloc as it comes (one arena per thread, up to eight
//!   per core; freed memory mostly stays with its arena);
//! - `glibc-tuned`: glibc's malloc with two arenas and a fixed 1 MiB trim
//!   threshold, set at [`init`], a thread that hands free pages back
//!   (`malloc_trim`) every [`TRIM_PERIOD`], and no per-thread cache of freed
//!   blocks ([`TUNABLES`]);
//! - `mimalloc`: Microsoft's mimalloc (crate `mimalloc`), default options;
//! - `jemalloc`: jemalloc (crate `tikv-jemallocator`) with a background
//!   purging thread and 1 s dirty-page decay ([`JEMALLOC_CONF`]).

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

#[cfg(any(
    all(feature = "system", feature = "glibc-tuned"),
    all(feature = "system", feature = "mimalloc"),
    all(feature = "system", feature = "jemalloc"),
    all(feature = "glibc-tuned", feature = "mimalloc"),
    all(feature = "glibc-tuned", feature = "jemalloc"),
    all(feature = "mimalloc", feature = "jemalloc"),
))]
compile_error!(
    "nodegate-alloc: more than one allocator feature is on; enable at most one of \
     system, glibc-tuned, mimalloc, jemalloc"
);

/// Which allocator this build uses, as the features below name it.
pub const NAME: &str = if cfg!(feature = "system") {
    "system"
} else if cfg!(feature = "glibc-tuned") {
    "glibc-tuned"
} else if cfg!(feature = "jemalloc") {
    "jemalloc"
} else if cfg!(feature = "mimalloc") {
    "mimalloc"
} else {
    SHIPPED
};

/// The allocator a build with no allocator feature uses.
pub const SHIPPED: &str = "glibc-tuned";

/// How often the `glibc-tuned` allocator's thread calls `malloc_trim`.
pub const TRIM_PERIOD: Duration = Duration::from_secs(10);

/// The glibc tunable `glibc-tuned` runs with: no per-thread cache of freed
/// blocks (tcache). Up to seven freed blocks of each size stay in each
/// thread's cache, where `malloc_trim` cannot reach them; spread over the
/// heap after a burst, each keeps its page resident. glibc reads tunables
/// only from the environment, when the program is loaded, so
/// [`restart_with_tunables`] starts the program again with them.
pub const TUNABLES: &str = "glibc.malloc.tcache_count=0";

/// The `jemalloc` candidate's options: a background thread purges unused
/// dirty pages after about a second, straight back to the kernel (no
/// lazily-freed "muzzy" stage, whose pages would still count as resident).
pub const JEMALLOC_CONF: &str = "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0";

#[cfg(feature = "jemalloc")]
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
/// jemalloc reads its options from this symbol when it starts
/// (tikv-jemalloc-sys prefixes jemalloc's symbols with `_rjem_`).
pub static malloc_conf: &[u8; JEMALLOC_CONF.len() + 1] = &{
    let mut conf = [0u8; JEMALLOC_CONF.len() + 1];
    let bytes = JEMALLOC_CONF.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        conf[i] = bytes[i];
        i += 1;
    }
    conf
};

#[cfg(feature = "jemalloc")]
type Inner = tikv_jemallocator::Jemalloc;
#[cfg(feature = "jemalloc")]
const INNER: Inner = tikv_jemallocator::Jemalloc;

#[cfg(feature = "mimalloc")]
type Inner = mimalloc::MiMalloc;
#[cfg(feature = "mimalloc")]
const INNER: Inner = mimalloc::MiMalloc;

#[cfg(not(any(feature = "jemalloc", feature = "mimalloc")))]
type Inner = std::alloc::System;
#[cfg(not(any(feature = "jemalloc", feature = "mimalloc")))]
const INNER: Inner = std::alloc::System;

fn glibc() -> bool {
    NAME == "system" || NAME == "glibc-tuned"
}

/// For a long-lived process (the controller, the memory examples): call
/// first in `main`, before [`init`] and before any thread starts. Only
/// `glibc-tuned` has anything to do: when `GLIBC_TUNABLES` does not set
/// `glibc.malloc.tcache_count`, it executes the program again (its own file,
/// the same arguments, the same process id) with [`TUNABLES`] added to that
/// variable, since glibc reads it only at load. A value the user set for the
/// tcache is kept. If the program cannot be executed again (no `execve`
/// fallback to a shell is tried), it says so and goes on with the cache on.
/// Short commands skip it: they end before a cache could matter.
pub fn restart_with_tunables() {
    if NAME != "glibc-tuned" || std::env::var_os(RESTARTED).is_some() {
        return;
    }
    let current = std::env::var_os("GLIBC_TUNABLES");
    if let Some(value) = tunables_to_add(current.as_deref()) {
        let err = start_again_with(&value);
        eprintln!(
            "nodegate: could not start again with GLIBC_TUNABLES={value} ({err}); \
             freed memory goes back to the system more slowly"
        );
    }
}

/// Sets the allocator up; call it first in `main` (after
/// [`restart_with_tunables`], where that is called), before any thread
/// starts. Only `glibc-tuned` has anything to do: it caps glibc's arenas at
/// two, fixes the trim threshold at 1 MiB (glibc otherwise raises it as the
/// program frees large blocks) and starts the trimming thread. Calling it
/// again does nothing more.
pub fn init() {
    if NAME != "glibc-tuned" {
        return;
    }
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        // SAFETY: mallopt takes two integers and changes only malloc's own
        // settings; called before other threads allocate.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 20);
        }
        let trimmer = std::thread::Builder::new()
            .name("malloc-trim".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(TRIM_PERIOD);
                    give_back();
                }
            });
        // Without the thread, memory still goes back at the lower trim
        // threshold, only less of it: not a reason to stop the program.
        if let Err(e) = trimmer {
            eprintln!("nodegate: could not start the malloc-trim thread: {e}");
        }
    });
}

/// The `GLIBC_TUNABLES` value to start again with, given the current one:
/// `None` when it already sets the tcache (ours or the user's), or cannot be
/// read as text (left alone rather than guessed at).
fn tunables_to_add(current: Option<&std::ffi::OsStr>) -> Option<String> {
    let current = match current {
        None => "",
        Some(v) => v.to_str()?,
    };
    if current
        .split(':')
        .any(|t| t.starts_with("glibc.malloc.tcache_count="))
    {
        return None;
    }
    Some(if current.is_empty() {
        TUNABLES.to_string()
    } else {
        format!("{current}:{TUNABLES}")
    })
}

/// Set in the environment of the program [`restart_with_tunables`] starts
/// again, so that it is started again at most once whatever glibc makes of
/// the variable.
const RESTARTED: &str = "NODEGATE_ALLOC_RESTARTED";

/// Replaces this process's program with itself, `GLIBC_TUNABLES=value` and
/// [`RESTARTED`] added to its environment; returns only when that fails.
/// `execve` itself, not `Command::exec`: glibc's `execvp` behind the latter
/// hands a file the kernel cannot run (`ENOEXEC`, as under qemu-user
/// without binfmt) to `/bin/sh` as a script.
fn start_again_with(value: &str) -> std::io::Error {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let cstring = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| std::io::Error::other("a NUL byte in an argument"))
    };
    // The program's own path, not /proc/self/exe: the process is named
    // after the file it runs (`ps`, `pgrep`, `top`), and that would be `exe`.
    let prepared = (|| {
        let exe = cstring(std::env::current_exe()?.as_os_str().as_bytes())?;
        let args = std::env::args_os()
            .map(|a| cstring(a.as_bytes()))
            .collect::<std::io::Result<Vec<_>>>()?;
        let mut env = Vec::new();
        for (k, v) in std::env::vars_os() {
            if k != "GLIBC_TUNABLES" && k != RESTARTED {
                env.push(cstring(&[k.as_bytes(), b"=", v.as_bytes()].concat())?);
            }
        }
        env.push(cstring(format!("GLIBC_TUNABLES={value}").as_bytes())?);
        env.push(cstring(format!("{RESTARTED}=1").as_bytes())?);
        Ok::<_, std::io::Error>((exe, args, env))
    })();
    let (exe, args, env) = match prepared {
        Ok(p) => p,
        Err(e) => return e,
    };
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    // SAFETY: every pointer is to a NUL-terminated string that lives until
    // the call returns, and both arrays end with a null pointer.
    unsafe { libc::execve(exe.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    std::io::Error::last_os_error()
}

/// Hands free memory the allocator keeps back to the kernel, where the
/// allocator needs to be asked (glibc: `malloc_trim(0)`). jemalloc and
/// mimalloc return memory on their own; for them it does nothing.
pub fn give_back() {
    if glibc() {
        // SAFETY: malloc_trim takes no pointer and only releases free memory.
        unsafe { libc::malloc_trim(0) };
    }
}

/// The global allocator the binary installs: the chosen allocator, as is.
pub struct Allocator;

// SAFETY: every call is forwarded unchanged to the chosen allocator.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        unsafe { INNER.alloc(layout) }
    }
    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        unsafe { INNER.alloc_zeroed(layout) }
    }
    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { INNER.dealloc(ptr, layout) }
    }
    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        unsafe { INNER.realloc(ptr, layout, new_size) }
    }
}

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// The chosen allocator, counting the bytes live on the heap
/// ([`live_bytes`]); for the memory examples.
pub struct Counting;

// SAFETY: every call is forwarded unchanged to the chosen allocator; the
// count is a side record.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { INNER.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { INNER.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { INNER.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { INNER.realloc(ptr, layout, new_size) }
    }
}

/// Bytes live on the heap, when [`Counting`] is the global allocator (0
/// otherwise).
pub fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// The process's resident memory (VmRSS) in KiB, as the memory examples
/// report it; 0 where /proc/self/status cannot be read.
pub fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_is_one_of_the_candidates() {
        assert!(["system", "glibc-tuned", "mimalloc", "jemalloc"].contains(&NAME));
        assert!(["system", "glibc-tuned", "mimalloc", "jemalloc"].contains(&SHIPPED));
    }

    /// What the shipped allocator's thread does every [`TRIM_PERIOD`]: free
    /// memory kept by glibc goes back to the kernel. 64 MiB in small blocks
    /// (below glibc's mmap threshold, so they stay in its arenas when freed)
    /// are allocated and freed; `give_back` must return most of it.
    #[test]
    fn give_back_returns_freed_small_blocks_to_the_kernel() {
        if !glibc() {
            return;
        }
        let before = resident_kib();
        let blocks: Vec<Vec<u8>> = (0..64 * 1024).map(|i| vec![i as u8; 1000]).collect();
        // A block above them all keeps free() from shrinking the heap's top
        // by itself: only give_back can return the memory below it.
        let pin = vec![1u8; 1000];
        let live = resident_kib();
        assert!(live > before + 48 * 1024, "{before} -> {live} KiB");
        drop(blocks);
        give_back();
        let after = resident_kib();
        assert!(
            after < live - 32 * 1024,
            "{live} KiB live, {after} KiB after freeing 64 MiB and give_back"
        );
        drop(pin);
    }

    #[test]
    fn the_tcache_tunable_is_added_once_and_a_users_setting_is_kept() {
        use std::ffi::OsStr;
        assert_eq!(tunables_to_add(None).as_deref(), Some(TUNABLES));
        assert_eq!(
            tunables_to_add(Some(OsStr::new(""))).as_deref(),
            Some(TUNABLES)
        );
        let other = "glibc.malloc.mxfast=0";
        assert_eq!(
            tunables_to_add(Some(OsStr::new(other))),
            Some(format!("{other}:{TUNABLES}"))
        );
        // Already there (after the restart) or set by the user: no restart.
        assert_eq!(tunables_to_add(Some(OsStr::new(TUNABLES))), None);
        let users = "glibc.malloc.mxfast=0:glibc.malloc.tcache_count=3";
        assert_eq!(tunables_to_add(Some(OsStr::new(users))), None);
        // A name that only begins like it is another tunable.
        assert_eq!(
            tunables_to_add(Some(OsStr::new("glibc.malloc.tcache_count_x=1"))),
            Some(format!("glibc.malloc.tcache_count_x=1:{TUNABLES}"))
        );
    }

    #[test]
    fn counting_counts_what_is_live() {
        let layout = Layout::from_size_align(4096, 8).expect("a valid layout");
        let before = live_bytes();
        // SAFETY: a non-zero layout; the block is freed with the same one.
        unsafe {
            let p = Counting.alloc(layout);
            assert!(!p.is_null());
            assert_eq!(live_bytes(), before + 4096);
            let p = Counting.realloc(p, layout, 8192);
            assert!(!p.is_null());
            assert_eq!(live_bytes(), before + 8192);
            Counting.dealloc(p, Layout::from_size_align(8192, 8).expect("a valid layout"));
        }
        assert_eq!(live_bytes(), before);
    }
}
