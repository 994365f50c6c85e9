/*
 * unicode.c — the Unicode the tokenizer needs and nothing more: UTF-8 scanning, the \p{L} /
 * \p{N} / \s classes of the pre-tokenizer patterns, NFC (canonical decomposition, canonical
 * ordering, primary composition incl. Hangul), Rust's from_utf8_lossy, and the GPT-2 byte-level
 * alphabet. Tables come from tools/gen-unicode-tables.py (Python unicodedata).
 */
#include "config.h"

#include <string.h>

#include <tdm/mem.h>

#include "tok_int.h"
#include "unicode_tables.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

size_t tdm_tok_utf8_next(const uint8_t *s, size_t len, uint32_t *ret_cp)
{
    uint8_t b = s[0];
    if (b < 0x80 || len < 2) {
        *ret_cp = b;
        return 1;
    }
    if (b < 0xE0) {
        *ret_cp = ((uint32_t)(b & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (b < 0xF0 || len < 4) {
        if (len < 3) {
            *ret_cp = b;
            return 1;
        }
        *ret_cp = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *ret_cp = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
              ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

/* Length of the valid sequence at s (1..4), or -(maximal invalid subpart length) as Rust's
 * Utf8Chunks computes it. */
static int utf8_seq(const uint8_t *s, size_t len)
{
    uint8_t b = s[0];
    if (b < 0x80)
        return 1;
    int w;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
        w = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        w = 3;
        if (b == 0xE0)
            lo = 0xA0;
        else if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        w = 4;
        if (b == 0xF0)
            lo = 0x90;
        else if (b == 0xF4)
            hi = 0x8F;
    } else
        return -1;
    if (len < 2 || s[1] < lo || s[1] > hi)
        return -1;
    for (int k = 2; k < w; k++)
        if ((size_t)k >= len || s[k] < 0x80 || s[k] > 0xBF)
            return -k;
    return w;
}

size_t tdm_tok_utf8_valid_prefix(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int w = utf8_seq(s + i, len - i);
        if (w < 0)
            return i;
        i += (size_t)w;
    }
    return i;
}

size_t tdm_tok_utf8_put(uint32_t cp, uint8_t *o)
{
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

char *tdm_tok_utf8_lossy(const uint8_t *s, size_t len, size_t *ret_len)
{
    /* each invalid byte becomes at most 3 bytes */
    size_t cap;
    if (tdm_size_muladd(len, 3, 1, &cap) != TDM_OK)
        return NULL;
    char *out = tdm_malloc(cap);
    size_t o = 0, i = 0;
    while (i < len) {
        int w = utf8_seq(s + i, len - i);
        if (w > 0) {
            memcpy(out + o, s + i, (size_t)w);
            o += (size_t)w;
            i += (size_t)w;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += (size_t)-w;
        }
    }
    out[o] = '\0';
    *ret_len = o;
    return out;
}

int tdm_tok_uc_is_ws(uint32_t cp)
{
    if (cp < 0x80)
        return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20;
    switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
        return 1;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

static const uint32_t *range_find(const uint32_t (*t)[3], size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < t[mid][0])
            hi = mid;
        else if (cp > t[mid][1])
            lo = mid + 1;
        else
            return t[mid];
    }
    return NULL;
}

int tdm_tok_uc_class(uint32_t cp)
{
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z')
            return TOK_CLS_L;
        if (cp >= '0' && cp <= '9')
            return TOK_CLS_N;
        return tdm_tok_uc_is_ws(cp) ? TOK_CLS_WS : TOK_CLS_OTHER;
    }
    if (tdm_tok_uc_is_ws(cp))
        return TOK_CLS_WS;
    const uint32_t *r = range_find(tdm_uc_cat, NELEM(tdm_uc_cat), cp);
    return r ? (int)r[2] : TOK_CLS_OTHER;
}

/* ---- NFC ---- */

#define HANGUL_S 0xAC00u
#define HANGUL_L 0x1100u
#define HANGUL_V 0x1161u
#define HANGUL_T 0x11A7u
#define HANGUL_LN 19u
#define HANGUL_VN 21u
#define HANGUL_TN 28u
#define HANGUL_NN (HANGUL_VN * HANGUL_TN)
#define HANGUL_SN (HANGUL_LN * HANGUL_NN)

static uint32_t ccc(uint32_t cp)
{
    if (cp < 0x300)
        return 0;
    const uint32_t *r = range_find(tdm_uc_ccc, NELEM(tdm_uc_ccc), cp);
    return r ? r[2] : 0;
}

static const uint32_t *decomp_find(uint32_t cp)
{
    size_t lo = 0, hi = NELEM(tdm_uc_decomp);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < tdm_uc_decomp[mid][0])
            hi = mid;
        else if (cp > tdm_uc_decomp[mid][0])
            lo = mid + 1;
        else
            return tdm_uc_decomp[mid];
    }
    return NULL;
}

/* Full canonical decomposition of cp appended at buf[*n]; depth is bounded by the data (<= 4). */
static void decompose(uint32_t cp, uint32_t *buf, size_t *n, int depth)
{
    if (cp >= HANGUL_S && cp < HANGUL_S + HANGUL_SN) {
        uint32_t si = cp - HANGUL_S;
        buf[(*n)++] = HANGUL_L + si / HANGUL_NN;
        buf[(*n)++] = HANGUL_V + (si % HANGUL_NN) / HANGUL_TN;
        if (si % HANGUL_TN)
            buf[(*n)++] = HANGUL_T + si % HANGUL_TN;
        return;
    }
    const uint32_t *d = cp >= 0xC0 && depth < 8 ? decomp_find(cp) : NULL;
    if (!d) {
        buf[(*n)++] = cp;
        return;
    }
    decompose(d[1], buf, n, depth + 1);
    if (d[2])
        decompose(d[2], buf, n, depth + 1);
}

static uint32_t compose(uint32_t a, uint32_t b)
{
    if (a >= HANGUL_L && a < HANGUL_L + HANGUL_LN && b >= HANGUL_V && b < HANGUL_V + HANGUL_VN)
        return HANGUL_S + ((a - HANGUL_L) * HANGUL_VN + (b - HANGUL_V)) * HANGUL_TN;
    if (a >= HANGUL_S && a < HANGUL_S + HANGUL_SN && (a - HANGUL_S) % HANGUL_TN == 0 &&
        b > HANGUL_T && b < HANGUL_T + HANGUL_TN)
        return a + (b - HANGUL_T);
    size_t lo = 0, hi = NELEM(tdm_uc_comp);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const uint32_t *e = tdm_uc_comp[mid];
        if (a < e[0] || (a == e[0] && b < e[1]))
            hi = mid;
        else if (a > e[0] || b > e[1])
            lo = mid + 1;
        else
            return e[2];
    }
    return 0;
}

/* NFC of one segment of code points in place; returns the new count. */
static size_t nfc_segment(uint32_t *c, size_t n)
{
    /* canonical ordering: stable sort of each run of non-starters by class */
    for (size_t i = 1; i < n; i++) {
        uint32_t cc = ccc(c[i]);
        if (cc == 0)
            continue;
        size_t j = i;
        while (j > 0) {
            uint32_t pc = ccc(c[j - 1]);
            if (pc <= cc)
                break;
            uint32_t t = c[j - 1];
            c[j - 1] = c[j];
            c[j] = t;
            j--;
        }
    }
    if (n == 0)
        return 0;
    size_t o = 1, starter = 0;
    int have_starter = ccc(c[0]) == 0;
    uint32_t last = have_starter ? 0 : 256;
    for (size_t i = 1; i < n; i++) {
        uint32_t ch = c[i], cc = ccc(ch);
        if (have_starter && (last < cc || last == 0)) {
            uint32_t comp = compose(c[starter], ch);
            if (comp) {
                c[starter] = comp;
                continue;
            }
        }
        if (cc == 0) {
            starter = o;
            have_starter = 1;
        }
        last = cc;
        c[o++] = ch;
    }
    return o;
}

char *tdm_tok_uc_nfc(tdm_arena_t *a, const char *src, size_t len, size_t *ret_len)
{
    const uint8_t *s = (const uint8_t *)src;
    size_t cap;
    if (tdm_size_muladd(len, 3, 1, &cap) != TDM_OK)
        return NULL;
    char *out = tdm_arena_alloc(a, cap);
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    uint32_t *cps = NULL;
    size_t cps_cap = 0;
    while (i < len) {
        /* a segment runs from one ASCII character (or the start) to the next ASCII character:
         * ASCII is never the second half of a composition and never reorders */
        size_t seg = i, j = i;
        int simple = 1;
        if (s[j] < 0x80)
            j++;
        while (j < len && s[j] >= 0x80) {
            uint32_t cp;
            j += tdm_tok_utf8_next(s + j, len - j, &cp);
            if (cp >= 0x300)
                simple = 0;
        }
        if (simple) {
            memcpy(out + o, s + seg, j - seg);
            o += j - seg;
            i = j;
            continue;
        }
        size_t need;
        if (tdm_size_mul(j - seg, 4, &need) != TDM_OK)
            return NULL;
        if (need > cps_cap) {
            cps = tdm_arena_calloc(a, need, sizeof(uint32_t));
            if (!cps)
                return NULL;
            cps_cap = need;
        }
        size_t n = 0;
        for (size_t k = seg; k < j;) {
            uint32_t cp;
            k += tdm_tok_utf8_next(s + k, j - k, &cp);
            decompose(cp, cps, &n, 0);
        }
        n = nfc_segment(cps, n);
        for (size_t k = 0; k < n; k++) {
            if (o + 4 > cap) {
                /* NFC can expand a little (excluded composites); grow once more */
                size_t ncap;
                if (tdm_size_muladd(cap, 2, 16, &ncap) != TDM_OK)
                    return NULL;
                char *nout = tdm_arena_alloc(a, ncap);
                if (!nout)
                    return NULL;
                memcpy(nout, out, o);
                out = nout;
                cap = ncap;
            }
            o += tdm_tok_utf8_put(cps[k], (uint8_t *)out + o);
        }
        i = j;
    }
    out[o] = '\0';
    *ret_len = o;
    return out;
}

/* ---- GPT-2 byte-level alphabet ---- */

uint32_t tdm_tok_bytelevel_char(uint8_t b)
{
    if (b <= 0x20)
        return 256u + b;
    if (b >= 0x7F && b <= 0xA0)
        return 256u + 33u + (b - 0x7Fu);
    if (b == 0xAD)
        return 256u + 33u + 34u;
    return b;
}

int tdm_tok_bytelevel_byte(uint32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp >= 256 && cp <= 288)
        return (int)(cp - 256);
    if (cp >= 289 && cp <= 322)
        return (int)(0x7F + (cp - 289));
    if (cp == 323)
        return 0xAD;
    return -1;
}
