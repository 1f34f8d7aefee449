#!/usr/bin/env python3
"""benches/uftrace_suite/suite.py - wprobe trace against uftrace's own tests.

Driven by run.sh (read it first). For each in-scope test of cases.txt and
each optimisation level, it builds the test's program from uftrace's tests/
directory (a copy exported from the mirror, never kept in this repository),
runs `wprobe trace` under each transport asked for, and `uftrace live` on a
-pg build as the reference, normalises every output with the test's sort
rule (uftrace's runner rules, re-implemented below: the part of each line
after `|`, lines before `main()` dropped, lines grouped per thread in the
order threads first appear) and compares it with the test's expected
output (its fixup for the level applied, as uftrace's runner does).

The test scripts (t*.py) are loaded with a stand-in for uftrace's runtest
module (below): it only records what the script gives its base class (the
program's name, the expected output, language, flags, sort rule) and what
its setup() and build() say (options, extra compiler flags).
"""

import argparse
import importlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import types

# uftrace's runner builds every test with these, and adds -fno-ipa-sra for
# GCC (tests/runtest.py: default_cflags, run_single_case).
DEFAULT_CFLAGS = ['-fno-inline', '-fno-builtin', '-fno-ipa-cp',
                  '-fno-omit-frame-pointer', '-D_FORTIFY_SOURCE=0']
LANGS = {'C': ('gcc', '.c'), 'C++': ('g++', '.cpp')}

# The C run-time's helpers (crti.o, crtbegin.o) that run before and after
# main in every GCC-built program. wprobe traces them (they are functions
# of the executable); the reference never does (they are not built with
# -pg). The runner hides them with -N so that both answer the same
# question.
CRT_HELPERS = ['_init', '_fini', 'frame_dummy', 'register_tm_clones',
               'deregister_tm_clones', '__do_global_dtors_aux']


class _Base:
    """Stand-in for runtest.TestBase: records what a test script says."""
    TEST_SUCCESS = 0
    TEST_UNSUPP_LANG = -1
    TEST_BUILD_FAIL = -2
    TEST_ABNORMAL_EXIT = -3
    TEST_TIME_OUT = -4
    TEST_DIFF_RESULT = -5
    TEST_NONZERO_RETURN = -6
    TEST_SKIP = -7
    TEST_SUCCESS_FIXED = -8
    supported_lang = {
        'C': {'cc': 'gcc', 'flags': 'CFLAGS', 'ext': '.c'},
        'C++': {'cc': 'g++', 'flags': 'CXXFLAGS', 'ext': '.cpp'},
    }
    default_cflags = DEFAULT_CFLAGS
    feature = set()
    uftrace_cmd = 'uftrace'
    basedir = ''

    def __init__(self, name, result, lang='C', cflags='', ldflags='',
                 sort='task', serial=False):
        self.name = name
        self.result = result
        self.lang = lang
        self.cflags = cflags
        self.ldflags = ldflags
        self.sort_method = sort
        self.subcmd = 'live'
        self.option = ''
        self.exearg = 't-' + name
        self.built = None

    def setup(self):
        pass

    def prepare(self):
        return ''

    def fixup(self, cflags, result):
        return result

    def build(self, name, cflags='', ldflags=''):
        self.built = (cflags, ldflags)
        return _Base.TEST_SUCCESS

    def strip_tracing_flags(self, cmd):
        cmd = cmd.replace('-pg', '').replace('-finstrument-functions', '')
        return re.sub(r'-fpatchable-function-entry=[0-9]+', '', cmd)

    def get_machine(self):
        return 'x86_64'

    def get_elf_machine(self):
        return 'x86_64'

    def is_32bit(self):
        return False

    def check_arch_patchable_dynamic_support(self):
        return True

    def check_dependency(self, item):
        return False

    def pr_debug(self, msg):
        pass

    def runcmd(self):
        return ''


def load(tests_dir, name):
    """The test case object of tests/NAME.py."""
    if 'runtest' not in sys.modules:
        mod = types.ModuleType('runtest')
        mod.TestBase = _Base
        mod.PyTestBase = _Base
        sys.modules['runtest'] = mod
        sys.path.insert(0, tests_dir)
    return importlib.import_module(name).TestCase()


def task_sort(output):
    """uftrace's `task` rule: from the first `main()` line to the first
    blank line, the function column of each `[TID] |` line, grouped per
    thread in the order threads first appear."""
    pids = {}
    order = []
    started = False
    pid_re = re.compile(r'[^[]+\[ *(\d+)\] ')
    for ln in output.split('\n'):
        if ' | main()' in ln:
            started = True
        if not started:
            continue
        if ln.strip() == '':
            break
        m = pid_re.match(ln)
        if not m:
            continue
        pid = int(m.group(1))
        if pid not in pids:
            pids[pid] = []
            order.append(pid)
        pids[pid].append(ln.split('|', 1)[-1])
    return '\n'.join('\n'.join(pids[p]) for p in order).strip()


def simple_sort(output):
    """uftrace's `simple` rule: the function column of every line that is
    neither blank nor a comment."""
    return '\n'.join(ln.split('|', 1)[-1] for ln in output.split('\n')
                     if ln.strip() != '' and not ln.startswith('#'))


def merge_leaves(text):
    """`foo() {` right before its `} /* foo */`, as one `foo();` line: the
    reference's --no-merge tests show leaves unmerged, wprobe always merges
    them."""
    lines = text.split('\n')
    out = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        m = re.match(r'^(\s*)(.*)\(\) \{$', ln)
        if m and i + 1 < len(lines) and \
                lines[i + 1] == '%s} /* %s */' % (m.group(1), m.group(2)):
            out.append('%s%s();' % (m.group(1), m.group(2)))
            i += 2
            continue
        out.append(ln)
        i += 1
    return '\n'.join(out)


def normalise(tc, output, merge):
    if type(tc).__dict__.get('sort') is not None:
        text = tc.sort(output)
    elif tc.sort_method == 'simple':
        text = simple_sort(output)
    else:
        text = task_sort(output)
    text = '\n'.join(ln.rstrip() for ln in text.split('\n'))
    return merge_leaves(text) if merge else text


def run(cmd, cwd, timeout, outfile=None):
    """(status, stdout): status None on a time-out."""
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, '', ''
    out = p.stdout.decode(errors='replace')
    if outfile is not None:
        try:
            with open(outfile, errors='replace') as f:
                out = f.read()
        except OSError:
            out = ''
    return p.returncode, out, p.stderr.decode(errors='replace')


def build(tc, tests_dir, work, level, pg):
    """Builds t-NAME in WORK for one level; True when it built."""
    cc, ext = LANGS[tc.lang]
    flags = '-%s' % level
    if pg:
        flags = '-pg ' + flags
    tc.built = None
    tc.build(tc.name, ' '.join([flags, tc.cflags, '-fno-ipa-sra']))
    if tc.built is None:
        return False
    cflags, ldflags = tc.built
    cmd = [cc, '-o', 't-' + tc.name] + DEFAULT_CFLAGS + shlex.split(cflags) + \
        [os.path.join(tests_dir, 's-' + tc.name + ext)] + \
        shlex.split(' '.join([tc.ldflags, ldflags]))
    return subprocess.run(cmd, cwd=work, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--tests', required=True, help="uftrace's tests/ directory")
    ap.add_argument('--cases', required=True)
    ap.add_argument('--wprobe', required=True)
    ap.add_argument('--transports', default='auto,inproc,ptrace')
    ap.add_argument('--levels', default='O0,O2')
    ap.add_argument('--uftrace', default='', help='uftrace binary (reference)')
    ap.add_argument('--only', default='', help='regex: tests to run')
    ap.add_argument('--out', required=True, help='directory for the diffs')
    ap.add_argument('--timeout', type=int, default=30)
    a = ap.parse_args()

    cases = []
    listed = set()
    for ln in open(a.cases):
        ln = ln.split('#', 1)[0].strip()
        if not ln:
            continue
        kind, name, rest = (ln.split(None, 2) + [''])[:3]
        listed.add(name)
        if kind == 'in' and re.search(a.only, name):
            cases.append((name, shlex.split(rest)))
    present = {f[:-3] for f in os.listdir(a.tests)
               if re.match(r't\d+_.*\.py$', f)}
    for n in sorted(present - listed):
        print('UNLISTED %s: not in cases.txt (add it as `in` or `out`)' % n)

    columns = a.transports.split(',') + (['uftrace'] if a.uftrace else [])
    levels = a.levels.split(',')
    os.makedirs(a.out, exist_ok=True)
    counts = {c: 0 for c in columns}
    total = 0
    print('%-28s %s' % ('test', '  '.join(
        '%-*s' % (len(levels) * 3 - 1, c[:len(levels) * 3 - 1]) for c in columns)))
    print('%-28s %s' % ('', '  '.join(
        ' '.join(levels) for _ in columns)))
    t0 = time.time()
    for name, wopts in cases:
        if name not in present:
            print('%-28s missing from the suite' % name)
            continue
        tc = load(a.tests, name)
        tc.setup()
        uopts = tc.option
        merge = '--no-merge' in uopts
        marks = {c: [] for c in columns}
        for level in levels:
            total += 1
            expect_raw = tc.fixup('-' + level, tc.result)
            expect = normalise(tc, tc.result, merge)
            expect_fixed = normalise(tc, expect_raw, merge)
            with tempfile.TemporaryDirectory(prefix='uftsuite-') as work:
                plain = build(tc, a.tests, work, level, pg=False)
                for col in columns:
                    if col == 'uftrace':
                        continue
                    if not plain:
                        marks[col].append('BI')
                        continue
                    outf = os.path.join(work, 'trace.out')
                    if os.path.exists(outf):
                        os.remove(outf)
                    cmd = [a.wprobe, 'trace', '--transport', col, '-o', outf]
                    for h in CRT_HELPERS:
                        cmd += ['-N', h]
                    cmd += wopts + ['--', './t-' + tc.name]
                    st, out, err = run(cmd, work, a.timeout, outf)
                    marks[col].append(verdict(
                        a.out, name, level, col, st, out, err, tc, merge,
                        expect, expect_fixed, ' '.join(cmd)))
                if a.uftrace:
                    if not build(tc, a.tests, work, level, pg=True):
                        marks['uftrace'].append('BI')
                    else:
                        pflag = '-P .' if '-fpatchable-function-entry' in \
                            ' '.join(tc.built) else ''
                        cmd = [a.uftrace, 'live', '--no-pager', '--no-event'] + \
                            shlex.split(pflag) + shlex.split(uopts) + \
                            ['t-' + tc.name]
                        st, out, err = run(cmd, work, a.timeout)
                        marks['uftrace'].append(verdict(
                            a.out, name, level, 'uftrace', st, out, err, tc,
                            merge, expect, expect_fixed, ' '.join(cmd)))
        for c in columns:
            counts[c] += sum(1 for m in marks[c] if m == 'OK')
        print('%-28s %s' % (name, '  '.join(' '.join(marks[c]) for c in columns)),
              flush=True)
    print()
    print('matched (of %d cases: %d tests x %s), %.0f s:' %
          (total, len(cases), '+'.join(levels), time.time() - t0))
    for c in columns:
        print('  %-8s %d' % (c, counts[c]))
    print('diffs of the cases that did not match: %s' % a.out)


def verdict(outdir, name, level, col, st, out, err, tc, merge, expect,
            expect_fixed, cmdline):
    if st is None:
        mark = 'TM'
        got = ''
    else:
        got = normalise(tc, out, merge)
        if col != 'uftrace':
            # PLT entries are named NAME@plt by wprobe, NAME by uftrace.
            got = re.sub(r'@plt\b', '', got)
        if st != 0:
            mark = 'NZ'
        elif got == expect or got == expect_fixed:
            mark = 'OK'
        else:
            mark = 'NG'
    if mark != 'OK':
        path = os.path.join(outdir, '%s.%s.%s' % (name, level, col))
        with open(path, 'w') as f:
            f.write('# %s\n# status %s\n' % (cmdline, st))
            f.write('--- expected\n%s\n--- got\n%s\n--- stderr\n%s\n--- raw\n%s' %
                    (expect_fixed, got, err[-4000:], out))
    return mark


if __name__ == '__main__':
    main()
