/* vkb_reader.h: a dependency-free C99 reader for vkc `.vkb` bundles (format 1.x, FORMAT.md).
 *
 * One header. In exactly one .c file:
 *
 *     #define VKB_READER_IMPLEMENTATION
 *     #include "vkb_reader.h"
 *
 * It reads from memory (what AAsset_getBuffer() or mmap() gives), never allocates, never copies,
 * and never reads outside [data, data + size). vkb_open() runs every container-level check of
 * FORMAT.md, in FORMAT.md's order: header, section table, bounds, overlap, alignment, checksums,
 * SPIR-V framing, zero padding. On success the accessors hand out pointers into `data`:
 *
 *     vkb_bundle b;  char err[256];
 *     if (vkb_open(ptr, len, &b, err, sizeof err) != VKB_OK) { log("%s", err); return; }
 *     const uint8_t *json = b.manifest;  size_t json_len = b.manifest_size;   // UTF-8, not NUL-terminated
 *     for (uint32_t i = 0; i < b.module_count; i++) {
 *         const uint8_t *code; size_t code_size;
 *         vkb_module(&b, i, &code, &code_size);    // -> VkShaderModuleCreateInfo.pCode / codeSize
 *     }
 *     const uint8_t *weights = b.weights;  size_t weights_size = b.weights_size;
 *
 * What it does NOT check: the manifest (JSON) and its cross-references (tensor ranges, bindings,
 * dispatch counts, module interfaces). A loader must parse and check those as FORMAT.md says
 * (bundles/manifest.py is the reference) before creating any Vulkan object from them.
 * That includes the barrier rule (FORMAT.md, "Barriers"; bundles/hazards.py is the reference):
 * the manifest's `barrier` flags must not be trusted. From each dispatch's bound byte ranges and
 * the bindings its SPIR-V may write (storage buffers not decorated NonWritable), a loader derives
 * where a barrier is required and refuses a schedule whose flags miss one, or the bundle's
 * dispatches may race on the arena.
 *
 * Pointers keep the alignment of `data`: sections are aligned relative to the start of the file
 * (SPIR-V to 16 bytes, weights to 4096 or 16384), so when `data` is page-aligned (mmap) the
 * weights are too, and when `data` is 4-byte aligned pCode is, as Vulkan requires.
 */
#ifndef VKB_READER_H
#define VKB_READER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VKB_VERSION_MAJOR 1            /* files of this major (any minor) or older are read */
#define VKB_VERSION_MINOR 2
#define VKB_HEADER_SIZE 32u
#define VKB_ENTRY_SIZE 32u
#define VKB_MIN_SECTIONS 2u
#define VKB_MAX_SECTIONS 4096u
#define VKB_MIN_WEIGHTS_ALIGNMENT 4096u
#define VKB_SPIRV_MAGIC 0x07230203u

enum { VKB_SECTION_MANIFEST = 1, VKB_SECTION_SPIRV = 2, VKB_SECTION_WEIGHTS = 3 };

/* Each failure names the check, with the same name the Python reader's BundleError.check uses. */
typedef enum vkb_status {
    VKB_OK = 0,
    VKB_ERR_ARGUMENT,            /* "argument": NULL data/out, or a module index out of range */
    VKB_ERR_HEADER_SIZE,         /* "header size" */
    VKB_ERR_MAGIC,               /* "magic" */
    VKB_ERR_VERSION,             /* "version": a newer major version */
    VKB_ERR_FILE_SIZE,           /* "file size" */
    VKB_ERR_SECTION_COUNT,       /* "section count" */
    VKB_ERR_TABLE_BOUNDS,        /* "section table bounds" */
    VKB_ERR_HEADER_CHECKSUM,     /* "header checksum" */
    VKB_ERR_SECTION_KIND,        /* "section kind" */
    VKB_ERR_SECTION_ALIGNMENT,   /* "section alignment" */
    VKB_ERR_SECTION_BOUNDS,      /* "section bounds" */
    VKB_ERR_SECTION_OVERLAP,     /* "section overlap" */
    VKB_ERR_SECTION_COUNTS,      /* "section counts" */
    VKB_ERR_WEIGHTS_ALIGNMENT,   /* "weights alignment" */
    VKB_ERR_SPIRV_SIZE,          /* "spirv size" */
    VKB_ERR_SECTION_CHECKSUM,    /* "section checksum" */
    VKB_ERR_SPIRV_MAGIC,         /* "spirv magic" */
    VKB_ERR_SPIRV_HEADER,        /* "spirv header" */
    VKB_ERR_SPIRV_INSTRUCTIONS,  /* "spirv instructions" */
    VKB_ERR_PADDING              /* "padding" */
} vkb_status;

typedef struct vkb_section {
    uint32_t kind;               /* VKB_SECTION_* */
    uint32_t alignment;
    uint64_t offset;             /* from the start of the file */
    uint64_t size;
    uint32_t checksum;           /* CRC-32 (zlib/IEEE) of the section's bytes */
} vkb_section;

typedef struct vkb_bundle {
    const uint8_t *data;         /* the file, as given to vkb_open */
    size_t size;
    uint16_t version_major, version_minor;
    uint32_t flags;
    uint32_t section_count;
    uint32_t module_count;       /* SPIRV sections, numbered in table order */
    const uint8_t *manifest;     /* the JSON manifest: manifest_size bytes, not NUL-terminated */
    size_t manifest_size;
    const uint8_t *weights;      /* the WEIGHTS section (size 0 when there is none) */
    size_t weights_size;
    uint32_t weights_alignment;  /* 0 when there is no WEIGHTS section */
} vkb_bundle;

/* Check the container and fill `out`. On failure returns the failed check and, when err != NULL,
 * writes a NUL-terminated message (naming the check and the values) of at most errlen bytes. */
vkb_status vkb_open(const void *data, size_t size, vkb_bundle *out, char *err, size_t errlen);

/* The check's name ("section checksum", ...) for a status; "ok" for VKB_OK. */
const char *vkb_check_name(vkb_status status);

/* SPIR-V module `index` (0 ..< module_count): its words, little-endian, and size in bytes. */
vkb_status vkb_module(const vkb_bundle *bundle, uint32_t index, const uint8_t **code, size_t *size);

/* Section-table entry `index` (0 ..< section_count), as read. */
vkb_status vkb_section_at(const vkb_bundle *bundle, uint32_t index, vkb_section *out);

/* CRC-32 (zlib/IEEE), continuing from `crc` (0 to start). */
uint32_t vkb_crc32(uint32_t crc, const uint8_t *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* VKB_READER_H */

#ifdef VKB_READER_IMPLEMENTATION
#ifndef VKB_READER_IMPLEMENTED
#define VKB_READER_IMPLEMENTED

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const uint32_t vkb__crc_table[256] = {
    0x00000000u, 0x77073096u, 0xee0e612cu, 0x990951bau, 0x076dc419u, 0x706af48fu,
    0xe963a535u, 0x9e6495a3u, 0x0edb8832u, 0x79dcb8a4u, 0xe0d5e91eu, 0x97d2d988u,
    0x09b64c2bu, 0x7eb17cbdu, 0xe7b82d07u, 0x90bf1d91u, 0x1db71064u, 0x6ab020f2u,
    0xf3b97148u, 0x84be41deu, 0x1adad47du, 0x6ddde4ebu, 0xf4d4b551u, 0x83d385c7u,
    0x136c9856u, 0x646ba8c0u, 0xfd62f97au, 0x8a65c9ecu, 0x14015c4fu, 0x63066cd9u,
    0xfa0f3d63u, 0x8d080df5u, 0x3b6e20c8u, 0x4c69105eu, 0xd56041e4u, 0xa2677172u,
    0x3c03e4d1u, 0x4b04d447u, 0xd20d85fdu, 0xa50ab56bu, 0x35b5a8fau, 0x42b2986cu,
    0xdbbbc9d6u, 0xacbcf940u, 0x32d86ce3u, 0x45df5c75u, 0xdcd60dcfu, 0xabd13d59u,
    0x26d930acu, 0x51de003au, 0xc8d75180u, 0xbfd06116u, 0x21b4f4b5u, 0x56b3c423u,
    0xcfba9599u, 0xb8bda50fu, 0x2802b89eu, 0x5f058808u, 0xc60cd9b2u, 0xb10be924u,
    0x2f6f7c87u, 0x58684c11u, 0xc1611dabu, 0xb6662d3du, 0x76dc4190u, 0x01db7106u,
    0x98d220bcu, 0xefd5102au, 0x71b18589u, 0x06b6b51fu, 0x9fbfe4a5u, 0xe8b8d433u,
    0x7807c9a2u, 0x0f00f934u, 0x9609a88eu, 0xe10e9818u, 0x7f6a0dbbu, 0x086d3d2du,
    0x91646c97u, 0xe6635c01u, 0x6b6b51f4u, 0x1c6c6162u, 0x856530d8u, 0xf262004eu,
    0x6c0695edu, 0x1b01a57bu, 0x8208f4c1u, 0xf50fc457u, 0x65b0d9c6u, 0x12b7e950u,
    0x8bbeb8eau, 0xfcb9887cu, 0x62dd1ddfu, 0x15da2d49u, 0x8cd37cf3u, 0xfbd44c65u,
    0x4db26158u, 0x3ab551ceu, 0xa3bc0074u, 0xd4bb30e2u, 0x4adfa541u, 0x3dd895d7u,
    0xa4d1c46du, 0xd3d6f4fbu, 0x4369e96au, 0x346ed9fcu, 0xad678846u, 0xda60b8d0u,
    0x44042d73u, 0x33031de5u, 0xaa0a4c5fu, 0xdd0d7cc9u, 0x5005713cu, 0x270241aau,
    0xbe0b1010u, 0xc90c2086u, 0x5768b525u, 0x206f85b3u, 0xb966d409u, 0xce61e49fu,
    0x5edef90eu, 0x29d9c998u, 0xb0d09822u, 0xc7d7a8b4u, 0x59b33d17u, 0x2eb40d81u,
    0xb7bd5c3bu, 0xc0ba6cadu, 0xedb88320u, 0x9abfb3b6u, 0x03b6e20cu, 0x74b1d29au,
    0xead54739u, 0x9dd277afu, 0x04db2615u, 0x73dc1683u, 0xe3630b12u, 0x94643b84u,
    0x0d6d6a3eu, 0x7a6a5aa8u, 0xe40ecf0bu, 0x9309ff9du, 0x0a00ae27u, 0x7d079eb1u,
    0xf00f9344u, 0x8708a3d2u, 0x1e01f268u, 0x6906c2feu, 0xf762575du, 0x806567cbu,
    0x196c3671u, 0x6e6b06e7u, 0xfed41b76u, 0x89d32be0u, 0x10da7a5au, 0x67dd4accu,
    0xf9b9df6fu, 0x8ebeeff9u, 0x17b7be43u, 0x60b08ed5u, 0xd6d6a3e8u, 0xa1d1937eu,
    0x38d8c2c4u, 0x4fdff252u, 0xd1bb67f1u, 0xa6bc5767u, 0x3fb506ddu, 0x48b2364bu,
    0xd80d2bdau, 0xaf0a1b4cu, 0x36034af6u, 0x41047a60u, 0xdf60efc3u, 0xa867df55u,
    0x316e8eefu, 0x4669be79u, 0xcb61b38cu, 0xbc66831au, 0x256fd2a0u, 0x5268e236u,
    0xcc0c7795u, 0xbb0b4703u, 0x220216b9u, 0x5505262fu, 0xc5ba3bbeu, 0xb2bd0b28u,
    0x2bb45a92u, 0x5cb36a04u, 0xc2d7ffa7u, 0xb5d0cf31u, 0x2cd99e8bu, 0x5bdeae1du,
    0x9b64c2b0u, 0xec63f226u, 0x756aa39cu, 0x026d930au, 0x9c0906a9u, 0xeb0e363fu,
    0x72076785u, 0x05005713u, 0x95bf4a82u, 0xe2b87a14u, 0x7bb12baeu, 0x0cb61b38u,
    0x92d28e9bu, 0xe5d5be0du, 0x7cdcefb7u, 0x0bdbdf21u, 0x86d3d2d4u, 0xf1d4e242u,
    0x68ddb3f8u, 0x1fda836eu, 0x81be16cdu, 0xf6b9265bu, 0x6fb077e1u, 0x18b74777u,
    0x88085ae6u, 0xff0f6a70u, 0x66063bcau, 0x11010b5cu, 0x8f659effu, 0xf862ae69u,
    0x616bffd3u, 0x166ccf45u, 0xa00ae278u, 0xd70dd2eeu, 0x4e048354u, 0x3903b3c2u,
    0xa7672661u, 0xd06016f7u, 0x4969474du, 0x3e6e77dbu, 0xaed16a4au, 0xd9d65adcu,
    0x40df0b66u, 0x37d83bf0u, 0xa9bcae53u, 0xdebb9ec5u, 0x47b2cf7fu, 0x30b5ffe9u,
    0xbdbdf21cu, 0xcabac28au, 0x53b39330u, 0x24b4a3a6u, 0xbad03605u, 0xcdd70693u,
    0x54de5729u, 0x23d967bfu, 0xb3667a2eu, 0xc4614ab8u, 0x5d681b02u, 0x2a6f2b94u,
    0xb40bbe37u, 0xc30c8ea1u, 0x5a05df1bu, 0x2d02ef8du,
};

uint32_t vkb_crc32(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    while (n--) crc = vkb__crc_table[(crc ^ *p++) & 0xFFu] ^ (crc >> 8);
    return ~crc;
}

static uint16_t vkb__u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t vkb__u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t vkb__u64(const uint8_t *p) { return (uint64_t)vkb__u32(p) | (uint64_t)vkb__u32(p + 4) << 32; }

static const char *const vkb__names[] = {
    "ok", "argument", "header size", "magic", "version", "file size", "section count",
    "section table bounds", "header checksum", "section kind", "section alignment", "section bounds",
    "section overlap", "section counts", "weights alignment", "spirv size", "section checksum",
    "spirv magic", "spirv header", "spirv instructions", "padding",
};

const char *vkb_check_name(vkb_status status) {
    unsigned i = (unsigned)status;
    return i < sizeof vkb__names / sizeof vkb__names[0] ? vkb__names[i] : "unknown";
}

/* Writes "bundle check 'NAME' failed: DETAIL" (the Python reader's wording) and returns status. */
static vkb_status vkb__fail(char *err, size_t errlen, vkb_status status, const char *fmt, ...) {
    if (err && errlen) {
        int n = snprintf(err, errlen, "bundle check '%s' failed: ", vkb_check_name(status));
        if (n >= 0 && (size_t)n < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return status;
}

static void vkb__entry(const uint8_t *data, uint32_t i, vkb_section *s) {
    const uint8_t *e = data + VKB_HEADER_SIZE + (size_t)VKB_ENTRY_SIZE * i;
    s->kind = vkb__u32(e);
    s->alignment = vkb__u32(e + 4);
    s->offset = vkb__u64(e + 8);
    s->size = vkb__u64(e + 16);
    s->checksum = vkb__u32(e + 24);
}

static const char *vkb__kind_name(uint32_t kind) {
    return kind == 1 ? "MANIFEST" : kind == 2 ? "SPIRV" : kind == 3 ? "WEIGHTS" : "?";
}

/* a sorts before b by (offset, end), as the reference reader sorts them */
static int vkb__before(const vkb_section *a, const vkb_section *b) {
    return a->offset < b->offset || (a->offset == b->offset && a->offset + a->size <= b->offset + b->size);
}

static vkb_status vkb__spirv(const uint8_t *p, uint64_t size, uint32_t index, char *err, size_t errlen) {
    uint64_t n = size / 4, i = 5;
    uint32_t version = vkb__u32(p + 4), bound = vkb__u32(p + 12), schema = vkb__u32(p + 16);
    uint32_t major = version >> 16 & 0xFFu, minor = version >> 8 & 0xFFu;
    if (vkb__u32(p) != VKB_SPIRV_MAGIC)
        return vkb__fail(err, errlen, VKB_ERR_SPIRV_MAGIC, "section %" PRIu32 " (SPIRV) starts with 0x%08" PRIx32
                         ", not the SPIR-V magic 0x%08x", index, vkb__u32(p), VKB_SPIRV_MAGIC);
    if ((version & 0xFF0000FFu) || major != 1 || minor > 6)
        return vkb__fail(err, errlen, VKB_ERR_SPIRV_HEADER, "section %" PRIu32 " (SPIRV) has version word 0x%08"
                         PRIx32 "; this reader knows SPIR-V 1.0 ..= 1.6", index, version);
    if (bound < 1 || bound > 0x3FFFFFu)
        return vkb__fail(err, errlen, VKB_ERR_SPIRV_HEADER, "section %" PRIu32 " (SPIRV) has id bound %" PRIu32
                         ", not in 1..=4194303", index, bound);
    if (schema != 0)
        return vkb__fail(err, errlen, VKB_ERR_SPIRV_HEADER, "section %" PRIu32 " (SPIRV) has schema word %" PRIu32
                         ", not 0", index, schema);
    while (i < n) {
        uint32_t count = vkb__u32(p + 4 * i) >> 16;
        if (count == 0)
            return vkb__fail(err, errlen, VKB_ERR_SPIRV_INSTRUCTIONS, "section %" PRIu32 " (SPIRV) has an "
                             "instruction of word count 0 at word %" PRIu64, index, i);
        i += count;
    }
    if (i != n)
        return vkb__fail(err, errlen, VKB_ERR_SPIRV_INSTRUCTIONS, "section %" PRIu32 " (SPIRV) has a last "
                         "instruction that runs %" PRIu64 " words past its end", index, i - n);
    return VKB_OK;
}

vkb_status vkb_open(const void *data_, size_t size_, vkb_bundle *out, char *err, size_t errlen) {
    const uint8_t *data = (const uint8_t *)data_;
    uint64_t size = (uint64_t)size_, file_size, table_end;
    uint32_t count, checksum, crc, i, j, manifests = 0, weights = 0;
    uint16_t major, minor;
    vkb_section s, t;

    if (err && errlen) err[0] = '\0';
    if (!out || (!data && size_))
        return vkb__fail(err, errlen, VKB_ERR_ARGUMENT, "vkb_open needs a bundle and an output");
    memset(out, 0, sizeof *out);

    /* ---- header ---- */
    if (size < VKB_HEADER_SIZE)
        return vkb__fail(err, errlen, VKB_ERR_HEADER_SIZE, "the file is %" PRIu64 " bytes but the header alone "
                         "is %u", size, VKB_HEADER_SIZE);
    if (memcmp(data, "VKCBNDL\0", 8) != 0)
        return vkb__fail(err, errlen, VKB_ERR_MAGIC, "the file does not start with 'VKCBNDL\\0'; it is not a .vkb bundle");
    major = vkb__u16(data + 8);
    minor = vkb__u16(data + 10);
    if (major > VKB_VERSION_MAJOR)
        return vkb__fail(err, errlen, VKB_ERR_VERSION, "the bundle is format version %u.%u but this reader "
                         "supports %d.%d (any %d.x); upgrade the reader", major, minor, VKB_VERSION_MAJOR,
                         VKB_VERSION_MINOR, VKB_VERSION_MAJOR);
    file_size = vkb__u64(data + 24);
    if (file_size != size)
        return vkb__fail(err, errlen, VKB_ERR_FILE_SIZE, "the header says %" PRIu64 " bytes but the file is %"
                         PRIu64 " bytes (truncated or extended?)", file_size, size);
    count = vkb__u32(data + 16);
    if (count < VKB_MIN_SECTIONS || count > VKB_MAX_SECTIONS)
        return vkb__fail(err, errlen, VKB_ERR_SECTION_COUNT, "section_count = %" PRIu32 " is not in %u..=%u",
                         count, VKB_MIN_SECTIONS, VKB_MAX_SECTIONS);
    table_end = VKB_HEADER_SIZE + (uint64_t)VKB_ENTRY_SIZE * count;
    if (table_end > size)
        return vkb__fail(err, errlen, VKB_ERR_TABLE_BOUNDS, "%" PRIu32 " sections need a table at bytes 32..%"
                         PRIu64 " but the file is %" PRIu64 " bytes", count, table_end, size);
    checksum = vkb__u32(data + 20);
    crc = vkb_crc32(vkb_crc32(0, data, 20), data + VKB_HEADER_SIZE, (size_t)(table_end - VKB_HEADER_SIZE));
    if (crc != checksum)
        return vkb__fail(err, errlen, VKB_ERR_HEADER_CHECKSUM, "the header says 0x%08" PRIx32 " but bytes 0..20 "
                         "and the table hash to 0x%08" PRIx32, checksum, crc);

    /* ---- each entry: kind, alignment, bounds ---- */
    for (i = 0; i < count; i++) {
        vkb__entry(data, i, &s);
        if (s.kind < 1 || s.kind > 3)
            return vkb__fail(err, errlen, VKB_ERR_SECTION_KIND, "section %" PRIu32 " (kind %" PRIu32 ") has unknown "
                             "kind %" PRIu32 " (known: 1 MANIFEST, 2 SPIRV, 3 WEIGHTS)", i, s.kind, s.kind);
        if (s.alignment < 4 || (s.alignment & (s.alignment - 1)))
            return vkb__fail(err, errlen, VKB_ERR_SECTION_ALIGNMENT, "section %" PRIu32 " (%s) has alignment %"
                             PRIu32 ", not a power of two >= 4", i, vkb__kind_name(s.kind), s.alignment);
        if (s.offset % s.alignment)
            return vkb__fail(err, errlen, VKB_ERR_SECTION_ALIGNMENT, "section %" PRIu32 " (%s) starts at byte %"
                             PRIu64 ", not a multiple of its alignment %" PRIu32, i, vkb__kind_name(s.kind),
                             s.offset, s.alignment);
        if (s.offset > size || s.size > size - s.offset)
            return vkb__fail(err, errlen, VKB_ERR_SECTION_BOUNDS, "section %" PRIu32 " (%s) spans bytes %" PRIu64
                             " + %" PRIu64 " but the file is %" PRIu64 " bytes", i, vkb__kind_name(s.kind),
                             s.offset, s.size, size);
    }
    /* ---- overlap: in (offset, end) order, each section starts at or after the end of the table and
     * of the one before; checked pairwise (equivalent, and needs no memory) ---- */
    for (i = 0; i < count; i++) {
        vkb__entry(data, i, &s);
        if (s.offset < table_end)
            return vkb__fail(err, errlen, VKB_ERR_SECTION_OVERLAP, "section %" PRIu32 " (%s) starts at byte %"
                             PRIu64 ", inside the header and section table (which ends at byte %" PRIu64 ")",
                             i, vkb__kind_name(s.kind), s.offset, table_end);
    }
    for (i = 0; i < count; i++) {
        vkb__entry(data, i, &s);
        for (j = i + 1; j < count; j++) {
            const vkb_section *a, *b;
            vkb__entry(data, j, &t);
            a = vkb__before(&s, &t) ? &s : &t;
            b = a == &s ? &t : &s;
            if (b->offset < a->offset + a->size)
                return vkb__fail(err, errlen, VKB_ERR_SECTION_OVERLAP, "section %" PRIu32 " (%s) starts at byte %"
                                 PRIu64 ", inside section %" PRIu32 " (%s) (which ends at byte %" PRIu64 ")",
                                 a == &s ? j : i, vkb__kind_name(b->kind), b->offset, a == &s ? i : j,
                                 vkb__kind_name(a->kind), a->offset + a->size);
        }
    }
    /* ---- counts and per-kind rules, in table order ---- */
    for (i = 0; i < count; i++) {
        vkb__entry(data, i, &s);
        manifests += s.kind == VKB_SECTION_MANIFEST;
        weights += s.kind == VKB_SECTION_WEIGHTS;
    }
    if (manifests != 1)
        return vkb__fail(err, errlen, VKB_ERR_SECTION_COUNTS, "a bundle has exactly one MANIFEST section; this one "
                         "has %" PRIu32, manifests);
    if (weights > 1)
        return vkb__fail(err, errlen, VKB_ERR_SECTION_COUNTS, "a bundle has at most one WEIGHTS section; this one "
                         "has %" PRIu32, weights);
    for (i = 0; i < count; i++) {
        vkb__entry(data, i, &s);
        if (s.kind == VKB_SECTION_WEIGHTS && s.alignment < VKB_MIN_WEIGHTS_ALIGNMENT)
            return vkb__fail(err, errlen, VKB_ERR_WEIGHTS_ALIGNMENT, "section %" PRIu32 " (WEIGHTS) has alignment %"
                             PRIu32 ", below %u", i, s.alignment, VKB_MIN_WEIGHTS_ALIGNMENT);
        if (s.kind == VKB_SECTION_SPIRV && (s.size < 20 || s.size % 4))
            return vkb__fail(err, errlen, VKB_ERR_SPIRV_SIZE, "section %" PRIu32 " (SPIRV) is %" PRIu64 " bytes, not a "
                             "multiple of 4 of at least 20 bytes (the 5-word SPIR-V header)", i, s.size);
    }
    /* ---- checksums, then SPIR-V framing (after the checksums: a bad module is a bad writer) ---- */
    for (i = 0; i < count; i++) {
        vkb__entry(data, i, &s);
        crc = vkb_crc32(0, data + s.offset, (size_t)s.size);
        if (crc != s.checksum)
            return vkb__fail(err, errlen, VKB_ERR_SECTION_CHECKSUM, "section %" PRIu32 " (%s) (bytes %" PRIu64 "..%"
                             PRIu64 ") should hash to 0x%08" PRIx32 " but hashes to 0x%08" PRIx32, i,
                             vkb__kind_name(s.kind), s.offset, s.offset + s.size, s.checksum, crc);
    }
    for (i = 0; i < count; i++) {
        vkb_status status;
        vkb__entry(data, i, &s);
        if (s.kind == VKB_SECTION_SPIRV && (status = vkb__spirv(data + s.offset, s.size, i, err, errlen)) != VKB_OK)
            return status;
    }
    /* ---- padding: every byte after the table that no non-empty section covers is zero ---- */
    for (i = 0; i <= count; i++) {
        uint64_t from = table_end, to = size, k;
        if (i < count) {
            vkb__entry(data, i, &s);
            if (s.size == 0) continue;
            from = s.offset + s.size;
        }
        for (j = 0; j < count; j++) {
            vkb__entry(data, j, &t);
            if (t.size && t.offset >= from && t.offset < to) to = t.offset;
        }
        for (k = from; k < to; k++)
            if (data[k])
                return vkb__fail(err, errlen, VKB_ERR_PADDING, "byte %" PRIu64 " lies between sections (bytes %" PRIu64
                                 "..%" PRIu64 ") and is 0x%02x, not zero", k, from, to, data[k]);
    }

    /* ---- accepted: hand out pointers ---- */
    out->data = data;
    out->size = size_;
    out->version_major = major;
    out->version_minor = minor;
    out->flags = vkb__u32(data + 12);
    out->section_count = count;
    out->weights = data;
    for (i = 0; i < count; i++) {
        vkb__entry(data, i, &s);
        if (s.kind == VKB_SECTION_MANIFEST) {
            out->manifest = data + s.offset;
            out->manifest_size = (size_t)s.size;
        } else if (s.kind == VKB_SECTION_WEIGHTS) {
            out->weights = data + s.offset;
            out->weights_size = (size_t)s.size;
            out->weights_alignment = s.alignment;
        } else {
            out->module_count++;
        }
    }
    return VKB_OK;
}

vkb_status vkb_module(const vkb_bundle *bundle, uint32_t index, const uint8_t **code, size_t *size) {
    uint32_t i, seen = 0;
    vkb_section s;
    if (!bundle || !bundle->data || !code || !size || index >= bundle->module_count) return VKB_ERR_ARGUMENT;
    for (i = 0; i < bundle->section_count; i++) {
        vkb__entry(bundle->data, i, &s);
        if (s.kind == VKB_SECTION_SPIRV && seen++ == index) {
            *code = bundle->data + s.offset;
            *size = (size_t)s.size;
            return VKB_OK;
        }
    }
    return VKB_ERR_ARGUMENT;
}

vkb_status vkb_section_at(const vkb_bundle *bundle, uint32_t index, vkb_section *out) {
    if (!bundle || !bundle->data || !out || index >= bundle->section_count) return VKB_ERR_ARGUMENT;
    vkb__entry(bundle->data, index, out);
    return VKB_OK;
}

#endif /* VKB_READER_IMPLEMENTED */
#endif /* VKB_READER_IMPLEMENTATION */
