//! Reading and writing another process's memory: `process_vm_readv`/
//! `process_vm_writev` (which honour the target's page protections and
//! return a short count or `EFAULT` instead of faulting) and `pread`/
//! `pwrite` on a descriptor such as `/proc/PID/mem`.

use std::os::fd::{AsRawFd, RawFd};

use nix::errno::Errno;

/// process_vm_readv of `buf.len()` bytes at `addr`; returns bytes read (may be short).
pub fn vm_read(pid: i32, addr: u64, buf: &mut [u8]) -> Result<usize, Errno> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, which is live and writable for its
    // length; `remote` is only interpreted in the other process.
    let r = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r as usize)
    }
}

/// process_vm_writev of `data` at `addr` (honours the target's page
/// protections); returns bytes written.
pub fn vm_write(pid: i32, addr: u64, data: &[u8]) -> Result<usize, Errno> {
    let local = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: `local` describes `data`, live for its length; the kernel only
    // reads it. `remote` is only interpreted in the other process.
    let r = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(r as usize)
    }
}

/// pread on a file descriptor (e.g. /proc/PID/mem); returns bytes read.
pub fn pread(fd: &impl AsRawFd, buf: &mut [u8], off: u64) -> Result<usize, Errno> {
    pread_raw(fd.as_raw_fd(), buf, off)
}

/// pread on a raw descriptor.
pub fn pread_raw(fd: RawFd, buf: &mut [u8], off: u64) -> Result<usize, Errno> {
    loop {
        // SAFETY: `buf` is live and writable for its length.
        let r = unsafe { libc::pread64(fd, buf.as_mut_ptr().cast(), buf.len(), off as i64) };
        match r {
            -1 if Errno::last() == Errno::EINTR => continue,
            -1 => return Err(Errno::last()),
            n => return Ok(n as usize),
        }
    }
}

/// pwrite on a file descriptor (e.g. /proc/PID/mem); returns bytes written.
pub fn pwrite(fd: &impl AsRawFd, data: &[u8], off: u64) -> Result<usize, Errno> {
    loop {
        // SAFETY: `data` is live for its length; the kernel only reads it.
        let r =
            unsafe { libc::pwrite64(fd.as_raw_fd(), data.as_ptr().cast(), data.len(), off as i64) };
        match r {
            -1 if Errno::last() == Errno::EINTR => continue,
            -1 => return Err(Errno::last()),
            n => return Ok(n as usize),
        }
    }
}
