/* faults.c - three handlers that misbehave, to show what the sandbox does
 * with them; the traced program runs on unharmed. No manifest: bind them
 * on the command line.
 *
 *   wprobe run faults.wasm --probe target_fn=spin -- ./probe_target   # fuel_exhausted 3
 *   wprobe run faults.wasm --probe target_fn=trap -- ./probe_target   # traps 3
 *   wprobe run faults.wasm --probe target_fn=wild -- ./probe_target
 *   faults:target_fn pid P tid T cpu C 1.0: (0, -1, -1)
 */
#include "wprobe.h"

static volatile wprobe_u64 sink;

/* Loops forever: fuel ends each run. */
WPROBE_HANDLER(spin)
{
    for (wprobe_u64 i = 0;; i++)
        sink = i;
}

/* Traps: a Wasm `unreachable`. */
WPROBE_HANDLER(trap)
{
    __builtin_trap();
}

static wprobe_i64 rec[3];
static unsigned char buf[8];
static wprobe_u32 item = WPROBE_ITEM(0, WPROBE_ITEM_RAW_WORDS);

/* Reads address 8, which no process maps: read_mem copies 0 bytes,
 * read_str returns -1 (byte 0 unreadable), check_access says FAULT (-1);
 * the three are logged. */
WPROBE_HANDLER(wild)
{
    rec[0] = wprobe_read_mem(8, (wprobe_i32)buf, 8);
    rec[1] = wprobe_read_str(8, (wprobe_i32)buf, 8);
    rec[2] = wprobe_check_access(8, 1);
    wprobe_emit_log(1, 0, (wprobe_i32)rec, sizeof rec, (wprobe_i32)&item, 1);
    return WPROBE_EXIT;
}
