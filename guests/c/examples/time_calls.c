/* time_calls.c - a return probe on target_fn(a, b, s) in probe_target:
 * when each call returns, log how long it took, its return value (rax at
 * the return) and its first argument as it was at the entry (rdi has been
 * reused by then).
 *
 *   wprobe run time_calls.wasm -- ./probe_target
 *   time_calls:target_fn pid P tid T cpu C 1.2: (1523, 13, 0)
 */
#include "wprobe.h"

WPROBE_MANIFEST(
    WPROBE_LINE("module probe_target")
    WPROBE_LINE("probe on_return")
    WPROBE_LINE("  location offset target_fn")
    WPROBE_LINE("  return yes")
    WPROBE_LINE("  maxactive 16")
    WPROBE_LINE("  minor 2"));

static wprobe_u32 item = WPROBE_ITEM(0, WPROBE_ITEM_RAW_WORDS);

WPROBE_HANDLER(on_return)
{
    wprobe_u64 w[3];
    w[0] = wprobe_elapsed();
    w[1] = (wprobe_u64)wprobe_read_reg(WPROBE_REG_RAX, 0);
    w[2] = wprobe_entry_arg(0);
    wprobe_emit_log(1, 2, (wprobe_i32)w, sizeof w, (wprobe_i32)&item, 1);
    return WPROBE_EXIT;
}
