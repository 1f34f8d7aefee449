/* histogram.c - a histogram of target_fn's first argument in power-of-two
 * buckets, kept in the run's global variables, logged when bump() runs.
 *
 *   wprobe run histogram.wasm -- ./probe_target 9
 *   histogram:bump pid P tid T cpu C 5.0: (1, 1, 2, 4, 1, 0, 0, 0)
 *
 * Bucket 0 counts a = 0, bucket k > 0 counts 2^(k-1) <= a < 2^k; the last
 * bucket also counts everything larger.
 */
#include "wprobe.h"

#define BUCKETS 8

WPROBE_MANIFEST(
    WPROBE_LINE("module probe_target")
    WPROBE_LINE("major 5")
    WPROBE_LINE("gvars 8")
    WPROBE_LINE("probe on_call")
    WPROBE_LINE("  location offset target_fn")
    WPROBE_LINE("  opcode 0x55")
    WPROBE_LINE("probe on_bump")
    WPROBE_LINE("  location offset bump")
    WPROBE_LINE("  opcode 0x55"));

static wprobe_i64 bucket(wprobe_u64 a)
{
    wprobe_i64 b = a ? 64 - __builtin_clzll(a) : 0;
    return b < BUCKETS ? b : BUCKETS - 1;
}

WPROBE_HANDLER(on_call)
{
    wprobe_i64 b = bucket(wprobe_read_reg(WPROBE_REG_RDI, 0));
    if (b < wprobe_gvar_count()) /* gvar_get traps beyond the count */
        wprobe_gvar_set(b, wprobe_gvar_get(b) + 1);
    return WPROBE_ABORT; /* no record for this hit */
}

static wprobe_u64 counts[BUCKETS];
static wprobe_u32 item = WPROBE_ITEM(0, WPROBE_ITEM_RAW_WORDS);

WPROBE_HANDLER(on_bump)
{
    for (int i = 0; i < BUCKETS; i++)
        counts[i] = i < wprobe_gvar_count() ? wprobe_gvar_get(i) : 0;
    wprobe_emit_log(5, 0, (wprobe_i32)counts, sizeof counts, (wprobe_i32)&item, 1);
    return WPROBE_EXIT;
}
