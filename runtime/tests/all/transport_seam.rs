//! The transport seam itself, driven directly on real processes under
//! every transport of the registry: arming through `Transport::insert`,
//! hits as `Event::Hit` with the tag given at insertion, suspend/resume.

use std::cell::Cell;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use runtime::probe::addr::RunAddr;
use runtime::transport::{Action, Event, Insert, OpenOptions, Target, Transport};
use runtime::wasm::regscan::RegsRead;

use crate::case;
use crate::support::case::Case;
use crate::support::cli::{gcc, progs};

pub const CASES: &[Case] = &[case!(suspend_stops_hits_and_resume_brings_them_back @ per_transport)];

/// `slow_target` (work(i) every 2 ms), non-PIE: link-time addresses are
/// run-time addresses.
fn slow_target() -> (std::path::PathBuf, u64) {
    let exe = gcc(
        "slow_target_nopie",
        &progs().join("slow_target.c"),
        &["-O0", "-fno-pie", "-no-pie"],
    );
    let elf = wprobe_elf::ElfInfo::open(&exe).unwrap();
    let wprobe_elf::Lookup::Found(work) = elf.lookup("work") else {
        panic!("no `work` in {}", exe.display());
    };
    (exe.clone(), work.value)
}

fn open(transport: &str, argv: &[std::ffi::OsString]) -> Box<dyn Transport> {
    let info = runtime::transport::by_name(transport).unwrap();
    (info.open)(
        Target::Launch(argv),
        &OpenOptions {
            follow_forks: false,
            verify_opcodes: true,
            reads_memory: false,
            registers: RegsRead::All,
            ring_full: Default::default(),
        },
    )
    .unwrap()
}

/// Hits stop at `suspend` (the probed byte is the original again under
/// ptrace) and come back at `resume`; the tag comes back with each hit;
/// the command runs to its normal end.
fn suspend_stops_hits_and_resume_brings_them_back(transport: &str) {
    let (exe, work) = slow_target();
    let calls = 300;
    let argv = [exe.clone().into_os_string(), calls.to_string().into()];
    let mut t = open(transport, &argv);
    let pid = t.main_pid();
    t.insert(7, pid, RunAddr(work), Insert::Breakpoint { opcode: None })
        .unwrap();
    t.set_tick(Duration::from_millis(100));
    let orig = wprobe_elf::ElfInfo::open(&exe)
        .unwrap()
        .first_byte(work)
        .unwrap();
    let hits = Cell::new(0u64);
    let (at_suspend, during) = (Cell::new(None::<u64>), Cell::new(None::<u64>));
    // Hits delivered while dormant that happened after `suspend` returned.
    let late = Cell::new(0u64);
    let ticks_dormant = Cell::new(0);
    let stop = AtomicBool::new(false);
    let status = t
        .run(&stop, &mut |t: &mut dyn Transport, ev: Event<'_>| {
            match ev {
                Event::Hit { tags, hit } => {
                    assert_eq!(tags, [7], "the tag given at insertion");
                    hits.set(hits.get() + 1);
                    // perf's sample times are converted to the wall clock
                    // with an offset measured once (microseconds off): a
                    // call made just before `suspend` may look just after
                    // it. The target calls every 2 ms.
                    if let (Some(when), None) = (at_suspend.get(), during.get())
                        && hit.now_ns() > when + 500_000
                    {
                        late.set(late.get() + 1);
                    }
                    if hits.get() == 10 {
                        t.suspend().unwrap();
                        at_suspend.set(Some(runtime::sys::time::realtime_ns()));
                    }
                }
                Event::Tick if at_suspend.get().is_some() && during.get().is_none() => {
                    ticks_dormant.set(ticks_dormant.get() + 1);
                    if transport == "ptrace" {
                        let mut b = [0u8];
                        let f = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
                        std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, work).unwrap();
                        assert_eq!(b[0], orig, "the original byte while dormant");
                    }
                    if ticks_dormant.get() == 3 {
                        // Three ticks (≥ 200 ms: up to 100 calls) dormant.
                        during.set(Some(hits.get()));
                        t.resume().unwrap();
                    }
                }
                _ => {}
            }
            Action::Continue
        })
        .unwrap();
    t.detach().unwrap();
    assert_eq!(
        status,
        Some(runtime::transport::ExitStatus::Code(0)),
        "the command ran to its end"
    );
    let during = during
        .get()
        .expect("the run lasted two ticks after suspend");
    // Under perf, samples the kernel wrote before the events were
    // disabled may still arrive (the target does not wait for wprobe);
    // none of a call made after `suspend`. Under ptrace, none at all.
    assert_eq!(late.get(), 0, "no hit made while dormant");
    if transport == "ptrace" {
        assert_eq!(during, 10, "no hit delivered while dormant");
    }
    let total = hits.get();
    assert!(
        total > during && total < calls,
        "hits resumed, and the dormant calls were not hits: {total} of {calls}"
    );
}
