"""SPIR-V checks of the readers: framing (both readers, same verdict) and the module interface
against the manifest (Python reader and writer). Modules come from glslang (harness.glslang), patched where needed."""
import json
import random
import struct
import zlib

from tests.bundles import c_reader
import pytest
from tests.harness import glslang

from bundles import BundleError, SectionKind, read_bundle, write_bundle
from bundles.spirv import Module, capability_features, device_requirements

MANIFEST, SPIRV, WEIGHTS = SectionKind.MANIFEST, SectionKind.SPIRV, SectionKind.WEIGHTS

COPY = """#version 450
{extra_top}
layout({local}) in;
layout(set = {set}, binding = 0) readonly buffer A {{ float a[]; }};
layout(set = 0, binding = {out_binding}) writeonly buffer B {{ float b[]; }};
{decls}
void main() {{
    uint i = gl_GlobalInvocationID.x;
    b[i] = a[i]{use};
}}
"""


def glsl(*, local="local_size_x = 64", set=0, out_binding=1, decls="", use="", extra_top="",
         env="vulkan1.1") -> bytes:
    return glslang(COPY.format(local=local, set=set, out_binding=out_binding, decls=decls, use=use,
                               extra_top=extra_top), env)


def bundle_bytes(raw, module: bytes, manifest=None) -> bytes:
    manifest = manifest or raw.make_minimal_manifest(1)
    return bytes(raw.build([(MANIFEST, 8, json.dumps(manifest).encode()), (SPIRV, 16, module),
                            (WEIGHTS, 4096, b"")]))


def expect(data, check, *fragments):
    with pytest.raises(BundleError) as info:
        read_bundle(data)
    assert info.value.check == check, str(info.value)
    for fragment in fragments:
        assert fragment in str(info.value), str(info.value)


def test_glslc_module_loads(raw):
    module = glsl()
    data = bundle_bytes(raw, module)
    assert bytes(read_bundle(data).spirv[0]) == module
    m = raw.make_minimal_manifest(1)
    assert write_bundle(m, [module], b"")


# ---- framing: the C reader agrees with the Python reader on every case -------------------------

def patched(module: bytes, word: int, value: int) -> bytes:
    out = bytearray(module)
    struct.pack_into("<I", out, 4 * word, value)
    return bytes(out)


FRAMING = [
    ("version 1.7", lambda m: patched(m, 1, 0x00010700), "spirv header", "version word 0x00010700"),
    ("version 2.0", lambda m: patched(m, 1, 0x00020000), "spirv header", "version word 0x00020000"),
    ("version low byte", lambda m: patched(m, 1, 0x00010301), "spirv header", "version word 0x00010301"),
    ("bound 0", lambda m: patched(m, 3, 0), "spirv header", "id bound 0, not in 1..=4194303"),
    ("bound too big", lambda m: patched(m, 3, 0x400000), "spirv header", "id bound 4194304"),
    ("schema", lambda m: patched(m, 4, 1), "spirv header", "schema word 1, not 0"),
    ("zero word count", lambda m: patched(m, 5, 0x00000011), "spirv instructions",
     "instruction of word count 0 at word 5"),
    ("runs past the end", lambda m: m + struct.pack("<I", 0x00050011), "spirv instructions",
     "runs 4 words past its end"),
    ("header only", lambda m: m[:20], None, None),  # framing-valid (no instructions); the interface check refuses it
    ("magic", lambda m: patched(m, 0, 0x03022307), "spirv magic", "starts with 0x03022307"),
]


@pytest.mark.parametrize("name, patch, check, fragment", FRAMING, ids=[c[0] for c in FRAMING])
def test_framing(raw, c_checker, name, patch, check, fragment):
    data = bundle_bytes(raw, patch(glsl()))
    exe, _ = c_checker
    line = c_reader.run(exe, [data])[0]
    assert c_reader.c_verdict(line) == c_reader.python_verdict(data), line
    if check is None:
        assert line.startswith("ACCEPT")
        expect(data, "spirv interface", "0 GLCompute entry points named 'main'")
    else:
        assert line.startswith(f"REJECT 0 {check}: "), line
        expect(data, check, fragment)


def test_framing_fuzz_readers_agree(raw, c_checker):
    """Re-sealed random edits of SPIR-V words (reader-level only: never run): both readers give the
    same container verdict, and the full Python read raises nothing but BundleError."""
    module = glsl()
    rng = random.Random(5)
    words = len(module) // 4
    blobs = []
    for _ in range(1500):
        m = bytearray(module)
        for _ in range(rng.randint(1, 3)):
            at = rng.choice([1, 3, 4] + [rng.randrange(5, words)] * 4)
            value = rng.choice([0, 1, 0xFFFFFFFF, 0x00010000, 0x00010600, 0x00010700, rng.getrandbits(32),
                                rng.randint(1, 8) << 16 | rng.randrange(400), struct.unpack_from("<I", m, 4 * at)[0] ^
                                1 << rng.randrange(32)])
            struct.pack_into("<I", m, 4 * at, value)
        if rng.random() < 0.2:
            m = m[:4 * rng.randint(5, words)] if rng.random() < 0.5 else m + m[20:20 + 4 * rng.randint(1, 8)]
        blobs.append(bundle_bytes(raw, bytes(m)))
    lines = c_reader.run(c_checker[0], blobs)
    verdicts = {}
    for data, line in zip(blobs, lines):
        assert c_reader.c_verdict(line) == c_reader.python_verdict(data), line
        try:
            read_bundle(data)
            verdicts["accepted"] = verdicts.get("accepted", 0) + 1
        except BundleError as e:
            verdicts[e.check] = verdicts.get(e.check, 0) + 1
    assert {"spirv header", "spirv instructions", "spirv interface"} <= set(verdicts), verdicts


# ---- the module's interface against the manifest (Python reader, and the writer) ---------------

def check_both(raw, module, manifest, *fragments):
    expect(bundle_bytes(raw, module, manifest), "spirv interface", *fragments)
    with pytest.raises(BundleError, match="spirv interface"):
        write_bundle(manifest, [module], b"")


def test_local_size_mismatch(raw):
    check_both(raw, glsl(local="local_size_x = 32"), raw.make_minimal_manifest(1),
               "module 0 ('copy') as kernel 0 has local size [32, 1, 1] but the manifest says [64, 1, 1]")


def test_binding_out_of_range(raw):
    check_both(raw, glsl(out_binding=2), raw.make_minimal_manifest(1),
               "binds a storage buffer at set 0, binding 2; the manifest gives it set 0, bindings 0..1")


def test_descriptor_set_other_than_0(raw):
    check_both(raw, glsl(set=1), raw.make_minimal_manifest(1), "at set 1, binding 0")


def test_push_constants_refused(raw):
    module = glsl(decls="layout(push_constant) uniform P { float s; };", use=" * s")
    check_both(raw, module, raw.make_minimal_manifest(1), "storage class PushConstant")


def test_uniform_buffer_refused(raw):
    module = glsl(out_binding=1, decls="layout(set = 0, binding = 1) uniform U { float u[4]; };",
                  use=" * u[0]")
    # binding 1 is now both a storage buffer and a uniform buffer; the uniform one is refused
    check_both(raw, module, raw.make_minimal_manifest(1), "storage class Uniform")


def test_shared_memory_beyond_manifest(raw):
    module = glsl(decls="shared float tile[512];", use=" + tile[i % 512]")
    manifest = raw.make_minimal_manifest(1)
    check_both(raw, module, manifest, "declares 2048 bytes of shared memory but the manifest says "
               "shared_memory_bytes = 0")
    manifest["modules"][0]["shared_memory_bytes"] = manifest["requirements"]["max_shared_memory_bytes"] = 2048
    assert read_bundle(bundle_bytes(raw, module, manifest)).manifest == manifest


def test_shared_memory_sized_by_specialization(raw):
    module = glsl(decls="layout(constant_id = 0) const int T = 4;\nshared float tile[T * 16];",
                  use=" + tile[i % 16]")
    manifest = raw.make_minimal_manifest(1)
    manifest["kernels"][0]["specialization"] = [{"id": 0, "type": "int32", "value": 8}]  # 8 * 16 floats
    manifest["modules"][0]["shared_memory_bytes"] = manifest["requirements"]["max_shared_memory_bytes"] = 256
    check_both(raw, module, manifest, "declares 512 bytes of shared memory", "shared_memory_bytes = 256")
    manifest["modules"][0]["shared_memory_bytes"] = manifest["requirements"]["max_shared_memory_bytes"] = 512
    assert read_bundle(bundle_bytes(raw, module, manifest)).manifest == manifest


def test_local_size_from_specialization(raw):
    module = glsl(local="local_size_x_id = 3")
    manifest = raw.make_minimal_manifest(1)
    check_both(raw, module, manifest, "has local size [1, 1, 1] but the manifest says [64, 1, 1]")  # default 1
    manifest["kernels"][0]["specialization"] = [{"id": 3, "type": "uint32", "value": 64}]
    assert read_bundle(bundle_bytes(raw, module, manifest)).manifest == manifest
    manifest["kernels"][0]["specialization"][0]["value"] = 32
    check_both(raw, module, manifest, "as kernel 0 has local size [32, 1, 1]")


def test_spirv_newer_than_vulkan_api(raw):
    module = glsl(env="vulkan1.2")  # SPIR-V 1.5
    manifest = raw.make_minimal_manifest(1)
    check_both(raw, module, manifest, "is SPIR-V 1.5, newer than the 1.3 that requirements.vulkan_api [1, 1] "
               "guarantees")
    manifest["requirements"]["vulkan_api"] = [1, 2, 0]
    assert read_bundle(bundle_bytes(raw, module, manifest)).manifest == manifest


def test_no_main_entry_point(raw):
    module = glsl().replace(b"main\0", b"mian\0", 1)
    check_both(raw, module, raw.make_minimal_manifest(1), "has 0 GLCompute entry points named 'main', not 1")


def test_specializing_a_64_bit_constant(raw):
    module = glsl(extra_top="#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require",
                  decls="layout(constant_id = 0) const int64_t BIG = 1;", use=" + float(BIG)")
    manifest = raw.make_minimal_manifest(1)
    assert read_bundle(bundle_bytes(raw, module, manifest))  # not specialized: the default is used
    manifest["kernels"][0]["specialization"] = [{"id": 0, "type": "int32", "value": 2}]
    check_both(raw, module, manifest, "specializes constant_id 0, which is not a 32-bit scalar")


def test_device_requirements(raw):
    module = glsl(extra_top="#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require",
                  decls="layout(constant_id = 0) const int64_t BIG = 1;", use=" + float(BIG)")
    manifest = raw.make_minimal_manifest(1)
    req = device_requirements(read_bundle(bundle_bytes(raw, module, manifest)))
    assert req["vulkan_api"] == "1.1.0" and req["vulkan_api_version"] == (1 << 22) | (1 << 12)
    assert req["features"] == ["VkPhysicalDeviceFeatures.shaderInt64"]
    assert capability_features([module]) == ["shaderInt64"]  # requirements.features' names
    # requirements.features (format 1.1) adds what the capabilities do not imply
    manifest["requirements"]["features"] = ["shaderInt64", "shaderFloat64"]
    assert device_requirements(read_bundle(bundle_bytes(raw, module, manifest)))["features"] == \
        ["VkPhysicalDeviceFeatures.shaderInt64", "shaderFloat64"]
    assert req["spirv_capabilities"] == ["Shader", "Int64"] and req["spirv_version"] == "1.3"
    assert req["limits"]["maxComputeWorkGroupSize"] == [64, 1, 1]
    assert req["limits"]["maxPerStageDescriptorStorageBuffers"] == 2
    assert Module(module).version == (1, 3)


def test_crc_helper_matches_zlib():
    assert zlib.crc32(b"123456789") == 0xCBF43926  # the check value FORMAT.md's CRC-32 must give
