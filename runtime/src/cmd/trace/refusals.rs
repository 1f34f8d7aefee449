//! The functions a trace leaves out, said once and grouped by reason:
//! those it does not select, and those whose probes the transport refused
//! (its refusals without what is particular to each function).

use std::collections::BTreeMap;

use crate::session::Session;
use crate::transport::Rule;

use super::funcs::NotTraced;
use super::handlers::HandlerModule;
use super::views;

/// A transport's refusal to arm a function's probes, without what is
/// particular to that function (its address, its name and file), so that
/// the functions refused for one reason are listed together: a program of
/// thousands of functions had a line each.
fn common_reason(why: &str) -> String {
    let mut r = why;
    for prefix in ["cannot patch the function at 0x", "cannot patch 0x"] {
        if let Some((_, rest)) = r.strip_prefix(prefix).and_then(|t| t.split_once(": ")) {
            r = rest;
        }
    }
    // `offset 0x… of PATH is in no function of its symbol table: …`.
    if r.starts_with("offset 0x")
        && let Some(i) = r.find(" is in no function of its symbol table")
    {
        return format!("it{}", &r[i..]);
    }
    // `NAME in PATH has no `ret` instruction …`.
    if let Some(i) = r.find(" has no `ret` instruction") {
        return format!("it{}", &r[i..]);
    }
    // `0x… is a `ret` where a return probe's calls return …`: its entry is
    // a `ret` another traced function's calls return through (a tail call
    // into a function that is a lone `ret`).
    if let Some(rest) = r
        .strip_prefix("0x")
        .and_then(|t| t.split_once(' ').map(|p| p.1))
    {
        return format!("its entry {rest}");
    }
    // `the N bytes the jump replaces at 0x… overlap those of the probe at
    // 0x…`: the window of another traced function (one starting inside it).
    if r.starts_with("the ")
        && r.contains(" bytes the jump replaces at 0x")
        && r.contains(" overlap those of the probe at 0x")
    {
        return "the bytes its jump would replace overlap those of another probe's jump (a \
                function starting inside them)"
            .into();
    }
    r.to_string()
}

/// Why a transport that breaks in code refuses a library function the
/// executable calls through a GOT slot ([`super::funcs::Origin::Got`]).
const GOT_ONLY_INPROC: &str = "called through its GOT slot, with no PLT entry (code built with \
     -fno-plt): only --transport inproc traces such calls";

/// Prints the functions not traced, once, grouped by reason.
pub(super) fn list_not_traced(skipped: &[NotTraced]) {
    let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for s in skipped {
        by_reason.entry(&s.reason).or_default().push(&s.name);
    }
    for (reason, names) in by_reason {
        crate::elog!("wprobe: not traced ({reason}): {}", names.join(", "));
    }
}

/// Says, once, which functions could not be traced and why (the
/// transport refused their entry or return probe).
pub(super) fn report_arm_failures(
    session: &Session,
    table: &views::Table,
    modules: &[HandlerModule],
    notices: &[bool],
) {
    let mut skipped: Vec<NotTraced> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (prog, index, why) in session.arm_failures() {
        // Two probes per function, or only its return probe.
        let per = if notices.get(*prog) == Some(&true) {
            1
        } else {
            2
        };
        let Some(&fi) = modules.get(*prog).and_then(|m| m.funcs.get(index / per)) else {
            continue;
        };
        if seen.insert(fi) {
            // A ptrace breakpoint or a uprobe goes into code; a GOT slot
            // holds an address.
            let reason = if table[fi].origin == super::funcs::Origin::Got
                && why.rule() == Some(Rule::NotExecutable)
            {
                GOT_ONLY_INPROC.to_string()
            } else {
                common_reason(&why.to_string())
            };
            skipped.push(NotTraced {
                name: table[fi].shown.clone(),
                reason,
            });
        }
    }
    list_not_traced(&skipped);
}

#[cfg(test)]
mod tests {
    #[test]
    fn refusals_lose_what_is_particular_to_the_function() {
        use super::common_reason;
        assert_eq!(
            common_reason(
                "cannot patch the function at 0x55996f37d510: _RNvYNtf in /tmp/p has no `ret` \
                 instruction (it ends in calls that do not return, or in tail calls out of the \
                 module): --transport inproc cannot observe its returns; use --transport ptrace"
            ),
            "it has no `ret` instruction (it ends in calls that do not return, or in tail calls \
             out of the module): --transport inproc cannot observe its returns; use --transport \
             ptrace"
        );
        assert_eq!(
            common_reason(
                "cannot patch 0x55996e4adae0: 0x55996e4adae0 is a `ret` where a return probe's \
                 calls return: a probe cannot share it"
            ),
            "its entry is a `ret` where a return probe's calls return: a probe cannot share it"
        );
        assert_eq!(
            common_reason(
                "cannot patch the function at 0x55996f37e454: no function symbol covers it \
                 (branch targets in the window cannot be ruled out)"
            ),
            "no function symbol covers it (branch targets in the window cannot be ruled out)"
        );
        assert_eq!(
            common_reason(
                "cannot patch the function at 0x2084630: the 5 bytes the jump replaces at \
                 0x2084630 overlap those of the probe at 0x2084634"
            ),
            "the bytes its jump would replace overlap those of another probe's jump (a function \
             starting inside them)"
        );
        assert_eq!(
            common_reason(
                "offset 0x11c0 of /tmp/p is in no function of its symbol table: --transport perf \
                 finds the returns of a return probe by decoding its function; use --transport \
                 ptrace"
            ),
            "it is in no function of its symbol table: --transport perf finds the returns of a \
             return probe by decoding its function; use --transport ptrace"
        );
        assert_eq!(common_reason("anything else"), "anything else");
    }
}
