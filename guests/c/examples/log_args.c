/* log_args.c - log the arguments of target_fn(a, b, s) in probe_target:
 * a and b as raw words, the string s read from the traced process.
 *
 *   wprobe run log_args.wasm -- ./probe_target
 *   log_args:target_fn pid P tid T cpu C 1.1: (0, 7) "hello, probes"
 */
#include "wprobe.h"

WPROBE_MANIFEST(
    WPROBE_LINE("module probe_target")
    WPROBE_LINE("major 1")
    WPROBE_LINE("probe on_target_fn")
    WPROBE_LINE("  location offset target_fn")
    WPROBE_LINE("  opcode 0x55")
    WPROBE_LINE("  minor 1"));

/* The record: two words, then a STRING item (token, u16 length, bytes). */
static struct {
    wprobe_u64 words[2];
    unsigned char token;
    unsigned char len[2];
    char text[256];
} __attribute__((packed)) rec;

static wprobe_u32 items[2];

WPROBE_HANDLER(on_target_fn)
{
    rec.words[0] = wprobe_read_reg(WPROBE_REG_RDI, 0);
    rec.words[1] = wprobe_read_reg(WPROBE_REG_RSI, 0);
    wprobe_i32 n = wprobe_read_str(wprobe_read_reg(WPROBE_REG_RDX, 0),
                                   (wprobe_i32)rec.text, sizeof rec.text);
    if (n < 0)
        n = 0; /* unreadable: log it empty */
    rec.token = WPROBE_TOKEN_STRING;
    rec.len[0] = n & 0xff;
    rec.len[1] = n >> 8;
    items[0] = WPROBE_ITEM(0, WPROBE_ITEM_RAW_WORDS);
    items[1] = WPROBE_ITEM(16, WPROBE_ITEM_TOKENIZED);
    wprobe_emit_log(1, 1, (wprobe_i32)&rec, 19 + n, (wprobe_i32)items, 2);
    return WPROBE_EXIT;
}
