#!/usr/bin/env python3
"""benches/trace/where.py - where a traced call's time goes, from two
`perf record -e cpu-clock` runs of `wprobe trace --transport inproc` (see
benches/trace/where.sh, which makes them).

usage: where.py AGENT_SO CALLS1 DATA1 CALLS2 DATA2

Each sample of the traced program is put in a part of the per-call path:
the stub and trampoline (the program's anonymous executable mappings other
than the agent's), the agent's code (symbolized with addr2line -i against
AGENT_SO, the agent object the wprobe binary embeds, mapped anonymously in
the target: the mapping whose size is that of the object's executable
segment) by the innermost function of ours it is inlined in, the vDSO,
the kernel, the program. wprobe's threads are counted by name (its main
thread drains the ring and builds the report). Per call = (samples of run 2 - samples of run 1) x the
sample period / (CALLS2 - CALLS1): the fixed costs cancel, as in
percall.sh. env: FREQ, the sampling frequency of both runs (10000).
"""
import bisect
import collections
import os
import re
import subprocess
import sys


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def agent_text(so):
    """(vaddr of the executable segment's page, its mapped size)."""
    for line in run("readelf", "-lW", so).splitlines():
        f = line.split()
        if f and f[0] == "LOAD" and "E" in f[6:-1]:
            vaddr, memsz = int(f[2], 16), int(f[5], 16)
            page = vaddr & ~0xFFF
            return page, (vaddr + memsz - page + 0xFFF) & ~0xFFF
    sys.exit("where: no executable segment in " + so)


def maps(data, agent_size):
    """The agent's mapping start and the other anonymous executable ones."""
    agent, others = None, []
    pat = re.compile(r"\[(0x[0-9a-f]+)\((0x[0-9a-f]+)\) @ \S+ .*\]: r-xp //anon")
    for line in run("perf", "script", "-i", data, "--show-mmap-events").splitlines():
        if "PERF_RECORD_MMAP" not in line or line.lstrip().startswith("wprobe"):
            continue
        m = pat.search(line)
        if not m:
            continue
        lo, size = int(m.group(1), 16), int(m.group(2), 16)
        if size == agent_size and agent is None:
            agent = lo
        else:
            others.append((lo, size))
    if agent is None:
        sys.exit("where: the agent's mapping was not found in " + data)
    return agent, others


def disassembly(so):
    d = {}
    for line in run("objdump", "-d", "--no-show-raw-insn", so).splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s*(.*)", line)
        if m:
            d[int(m.group(1), 16)] = m.group(2).strip()
    return d


PARTS = [
    ("ring::", "ring write (ring::push_notice, reserve)"),
    ("lock::", "store lock"),
    ("StoreLock", "store lock"),
    ("call_on_stack", "switch to the agent stack"),
    ("calls::", "calls tracking (calls::, pairing)"),
    ("pairing::", "calls tracking (calls::, pairing)"),
    ("thread::", "dispatch: the thread's slot"),
    ("dispatch", "dispatch (checks, site, MXCSR, enter/leave)"),
    ("fast::", "fast path (checks, pairing, the tracked call, the notice)"),
    ("wprobe_agent_fast", "fast path (checks, pairing, the tracked call, the notice)"),
]


THREADS = {
    "wprobe-main": "wprobe: main thread (the ring's drain, the report)",
    "wprobe-read": "wprobe: wprobe-read (reads modules for arming)",
    "wprobe-flush": "wprobe: wprobe-flush",
    "wprobe-prefetch": "wprobe: wprobe-prefetch",
    "wprobe-heartbea": "wprobe: wprobe-heartbeat",
}


def part(chain, prev):
    if prev.startswith("rdtsc"):
        return "time: rdtsc"
    if prev.startswith("rdpid"):
        return "cpu number: rdpid"
    s = " ".join(chain)
    if "vdso::" in s:
        return "time: TSC to ns in the target (vdso::wall_ns_at)"
    for key, name in PARTS:
        if key in s:
            return name
    return "agent, other"


def count(data, so, text_page, text_size):
    agent, others = maps(data, text_size)
    base = agent - text_page
    parts, offs = collections.Counter(), collections.Counter()
    pat = re.compile(r"\s*(\S+)\s+([0-9a-f]+)\s+\((.*)\)")
    for line in run("perf", "script", "-i", data, "-F", "comm,ip,dso").splitlines():
        m = pat.match(line)
        if not m:
            continue
        comm, ip, dso = m.group(1), int(m.group(2), 16), m.group(3)
        if comm.startswith("wprobe"):
            # The main thread is named after the binary (wprobe, or a copy's
            # name): any other name of ours is a helper thread's.
            parts[THREADS.get(comm, THREADS["wprobe-main"])] += 1
        elif agent <= ip < agent + text_size:
            offs[ip - base] += 1
        elif any(lo <= ip < lo + n for lo, n in others):
            parts["stub and trampoline"] += 1
        elif "vdso" in dso:
            parts["time: vDSO clock_gettime (no TSC rate published yet)"] += 1
        elif "kernel" in dso:
            parts["kernel"] += 1
        else:
            parts["the program, libc"] += 1
    return parts, offs


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    so, c1, d1, c2, d2 = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
    page, size = agent_text(so)
    p1, o1 = count(d1, so, page, size)
    p2, o2 = count(d2, so, page, size)
    addrs = sorted(set(o1) | set(o2))
    chains, cur = {}, None
    out = run("addr2line", "-a", "-i", "-f", "-C", "-e", so, *[hex(a) for a in addrs])
    for line in out.splitlines():
        if line.startswith("0x"):
            cur = int(line, 16)
            chains[cur] = []
        elif not line.startswith(("/", "?")):
            chains[cur].append(line)
    dis = disassembly(so)
    keys = sorted(dis)
    for a in addrs:
        i = bisect.bisect_left(keys, a)
        prev = dis[keys[i - 1]] if i > 0 else ""
        name = part(chains.get(a, []), prev)
        p1[name] += o1.get(a, 0)
        p2[name] += o2.get(a, 0)
    period_ns = 1e9 / float(os.environ.get("FREQ", "10000"))
    calls = c2 - c1
    rows = sorted(set(p1) | set(p2), key=lambda k: -(p2[k] - p1[k]))
    target = sum(p2[k] - p1[k] for k in rows if not k.startswith("wprobe"))
    print(f"{'part':58} {'run1':>6} {'run2':>6} {'ns/call':>8} {'% target':>8}")
    for k in rows:
        d = p2[k] - p1[k]
        share = "" if k.startswith("wprobe") else f"{100 * d / target:.1f}"
        print(f"{k:58} {p1[k]:6d} {p2[k]:6d} {d * period_ns / calls:8.1f} {share:>8}")
    print(f"{'the target, all':58} {'':6} {'':6} {target * period_ns / calls:8.1f} {'100.0':>8}")
    tracer = sum(p2[k] - p1[k] for k in rows if k.startswith("wprobe"))
    print(f"{'wprobe, all threads':58} {'':6} {'':6} {tracer * period_ns / calls:8.1f}")


if __name__ == "__main__":
    main()
