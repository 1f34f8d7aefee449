/* watch_counter.c - a hardware watchpoint on writes to probe_target's
 * 8-byte `counter`: log the value just written and the address of the
 * instruction after the write. DR6 says which of DR0-DR3 fired; that debug
 * register holds the watched address.
 *
 *   wprobe run watch_counter.wasm -- ./probe_target
 *   watch_counter:counter pid P tid T cpu C 11.0: (0, 0x401170)
 */
#include "wprobe.h"

WPROBE_MANIFEST(
    WPROBE_LINE("module probe_target")
    WPROBE_LINE("major 11")
    WPROBE_LINE("probe on_write")
    WPROBE_LINE("  location offset counter")
    WPROBE_LINE("  watch w")
    WPROBE_LINE("  length 8")
    WPROBE_LINE("  maxhits 2"));

static wprobe_u64 rec[2];
static wprobe_u32 item = WPROBE_ITEM(0, WPROBE_ITEM_RAW_WORDS);

static wprobe_u64 watched(void)
{
    wprobe_u64 dr6 = wprobe_read_reg(WPROBE_REG_DR6, 0);
    int slot = 0;
    for (int i = 0; i < 4; i++)
        if (dr6 & (1ull << i)) {
            slot = i;
            break;
        }
    return wprobe_read_reg(WPROBE_REG_DR0 + slot, 0);
}

WPROBE_HANDLER(on_write)
{
    if (wprobe_read_mem(watched(), (wprobe_i32)&rec[0], 8) != 8)
        rec[0] = ~0ull;
    rec[1] = wprobe_read_reg(WPROBE_REG_RIP, 0);
    wprobe_emit_log(11, 0, (wprobe_i32)rec, sizeof rec, (wprobe_i32)&item, 1);
    return WPROBE_EXIT;
}
