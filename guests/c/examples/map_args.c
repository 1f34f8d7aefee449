/* map_args.c - aggregate in wprobe's map service instead of logging a
 * record per hit: calls of target_fn counted by the parity of its first
 * argument, and a power-of-two histogram of that argument. The maps live
 * on the handler side and are printed once, at exit, as bpftrace prints
 * `@calls[arg0 % 2] = count(); @sizes = hist(arg0);`.
 *
 *   wprobe run map_args.wasm -- ./probe_target 9
 *   Attaching 1 probe...
 *   ...
 *   @calls[0]: 5
 *   @calls[1]: 4
 *   ...
 */
#include "wprobe.h"

WPROBE_MANIFEST(
    WPROBE_LINE("module probe_target")
    WPROBE_LINE("major 6")
    WPROBE_LINE("map @calls count key=u64")
    WPROBE_LINE("map @sizes hist key=")
    WPROBE_LINE("probe on_call")
    WPROBE_LINE("  location offset target_fn"));

static wprobe_u64 parity;

WPROBE_HANDLER(on_call)
{
    wprobe_u64 a = wprobe_read_reg(WPROBE_REG_RDI, 0);
    parity = a % 2;
    wprobe_map_update(0, (wprobe_i32)&parity, sizeof parity, WPROBE_MAP_OP_COUNT, 1);
    wprobe_map_update(1, 0, 0, WPROBE_MAP_OP_HIST, (wprobe_i64)a);
    return WPROBE_ABORT; /* no record: the maps hold the result */
}
