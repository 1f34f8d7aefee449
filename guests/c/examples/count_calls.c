/* count_calls.c - count the calls of a function in a variable that
 * persists across hits and log the running count. No manifest: bind the
 * handler on the command line.
 *
 *   wprobe run count_calls.wasm --probe target_fn=count -- ./probe_target
 *   count_calls:target_fn pid P tid T cpu C 1.0: (1)
 */
#include "wprobe.h"

static wprobe_u64 calls;
static wprobe_u32 item = WPROBE_ITEM(0, WPROBE_ITEM_RAW_WORDS);

WPROBE_HANDLER(count)
{
    calls++;
    wprobe_emit_log(1, 0, (wprobe_i32)&calls, sizeof calls, (wprobe_i32)&item, 1);
    return WPROBE_EXIT;
}
