"""`vkc package --android`: asset placement, 16 KiB re-layout, requirements JSON, Gradle edits."""
import json
import re
import textwrap

import pytest

from typer.testing import CliRunner

from bundles import BundleError, read_bundle, write_bundle
from compiler.cli import app
from compiler.package_android import PackageError, ensure_no_compress, find_app_module, package_android
from tests.sample_bundle import MODULES, make_manifest, make_weights

KTS = textwrap.dedent("""\
    plugins {
        id("com.android.application")
        id("org.jetbrains.kotlin.android")
    }

    android {
        namespace = "com.example.app"
        compileSdk = 34

        defaultConfig {
            applicationId = "com.example.app"  // { braces in comments } are ignored
            minSdk = 26
        }
        buildTypes {
            release {
                isMinifyEnabled = false
            }
        }
    }

    dependencies {
        implementation("androidx.core:core-ktx:1.12.0")
    }
    """)

GROOVY = textwrap.dedent("""\
    plugins {
      id 'com.android.application'
    }

    android {
      namespace 'com.example.app'
      compileSdk 34
      androidResources {
        noCompress += 'tflite'
      }
      defaultConfig {
        minSdk 26
        resValue "string", "braces", "}{"
      }
    }
    """)

ALREADY = KTS.replace('    namespace = "com.example.app"\n',
                      '    namespace = "com.example.app"\n    androidResources {\n'
                      '        noCompress += listOf(\n            "tflite",\n            "vkb",\n        )\n    }\n')

UNSAFE = {
    "no android block (convention plugin)": 'plugins {\n    id("my.android.convention")\n}\n',
    "two android blocks": KTS + "\nandroid {\n    compileSdk = 35\n}\n",
    "unbalanced braces": KTS.replace("    }\n}\n\ndependencies", "    }\n\ndependencies"),
    "one-line android block": 'plugins { id("com.android.application") }\nandroid { namespace = "x" }\n',
    "unterminated string": KTS + 'val s = "oops\n',
    "androidResources on one line": KTS.replace('    compileSdk = 34\n',
                                                '    compileSdk = 34\n    androidResources { ignoreAssetsPattern = "!.svn" }\n'),
}


@pytest.fixture
def manifest():
    return make_manifest()


@pytest.fixture
def bundle_file(tmp_path, manifest):
    path = tmp_path / "model.vkb"
    path.write_bytes(write_bundle(manifest, list(MODULES), make_weights()))
    return path


def make_app(root, build_name, text, *, module="app"):
    mod = root / module if module else root
    mod.mkdir(parents=True, exist_ok=True)
    (root / "settings.gradle.kts").write_text('include(":app")\n')
    if build_name:
        (mod / build_name).write_text(text)
    return mod


def test_kotlin_dsl_added_and_assets_written(tmp_path, bundle_file):
    app = tmp_path / "MyApp"
    module = make_app(app, "build.gradle.kts", KTS)
    result = package_android(bundle_file, app)
    assert result.module == module and result.asset == module / "src/main/assets/model.vkb"
    assert result.asset.read_bytes() == bundle_file.read_bytes() and not result.relaid
    assert result.gradle.action == "added"
    text = (module / "build.gradle.kts").read_text()
    assert text == KTS.replace("        }\n    }\n}\n\ndependencies",
                               '        }\n    }\n    androidResources {\n        noCompress += "vkb"\n    }\n}\n\n'
                               "dependencies"), text
    # a second run finds it and changes nothing
    again = package_android(bundle_file, app)
    assert again.gradle.action == "already" and (module / "build.gradle.kts").read_text() == text


def test_groovy_existing_android_resources_extended(tmp_path, bundle_file):
    module = make_app(tmp_path / "g", "build.gradle", GROOVY)
    result = package_android(bundle_file, tmp_path / "g")
    assert result.gradle.action == "added"
    text = (module / "build.gradle").read_text()
    assert "  androidResources {\n    noCompress += 'vkb'\n    noCompress += 'tflite'\n  }" in text, text
    assert text.count("androidResources") == 1 and '"}{"' in text


def test_already_configured_is_left_alone(tmp_path, bundle_file):
    module = make_app(tmp_path / "a", "build.gradle.kts", ALREADY)
    result = package_android(bundle_file, tmp_path / "a")
    assert result.gradle.action == "already"
    assert (module / "build.gradle.kts").read_text() == ALREADY


def test_commented_out_setting_does_not_count(tmp_path, bundle_file):
    text = KTS.replace("    compileSdk = 34\n", '    compileSdk = 34\n    // noCompress += "vkb"\n')
    make_app(tmp_path / "c", "build.gradle.kts", text)
    assert package_android(bundle_file, tmp_path / "c").gradle.action == "added"


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_unsafe_files_are_not_edited(tmp_path, bundle_file, case):
    module = make_app(tmp_path / "u", "build.gradle.kts", UNSAFE[case])
    result = package_android(bundle_file, tmp_path / "u")
    assert result.gradle.action == "manual" and result.gradle.reason
    assert result.gradle.snippet == 'android {\n    androidResources {\n        noCompress += "vkb"\n    }\n}\n'
    assert (module / "build.gradle.kts").read_text() == UNSAFE[case]  # untouched
    assert result.asset.is_file()  # the bundle is still shipped


def test_no_build_file_and_no_edit_option(tmp_path, bundle_file):
    make_app(tmp_path / "n", None, "")
    result = package_android(bundle_file, tmp_path / "n")
    assert result.gradle.action == "manual" and result.gradle.file is None
    make_app(tmp_path / "m", "build.gradle", GROOVY)
    result = package_android(bundle_file, tmp_path / "m", edit_gradle=False)
    assert result.gradle.action == "manual" and "noCompress += 'vkb'" in result.gradle.snippet
    assert (tmp_path / "m/app/build.gradle").read_text() == GROOVY


def test_module_dir_given_directly(tmp_path, bundle_file):
    module = make_app(tmp_path / "mod", "build.gradle.kts", KTS, module=None)
    assert find_app_module(module) == module
    assert package_android(bundle_file, module, name="net").asset == module / "src/main/assets/net.vkb"


def test_not_an_android_project(tmp_path, bundle_file):
    (tmp_path / "empty").mkdir()
    with pytest.raises(PackageError, match="not an Android project"):
        package_android(bundle_file, tmp_path / "empty")
    with pytest.raises(PackageError, match="not a directory"):
        package_android(bundle_file, tmp_path / "missing")
    make_app(tmp_path / "x", "build.gradle.kts", KTS)
    with pytest.raises(PackageError, match="plain file name"):
        package_android(bundle_file, tmp_path / "x", name="../evil")
    with pytest.raises(PackageError, match="page size"):
        package_android(bundle_file, tmp_path / "x", page_size=8192)


def test_invalid_bundle_refused(tmp_path, bundle_file):
    make_app(tmp_path / "b", "build.gradle.kts", KTS)
    bad = tmp_path / "bad.vkb"
    bad.write_bytes(bundle_file.read_bytes()[:-1])
    with pytest.raises(BundleError, match="file size"):
        package_android(bad, tmp_path / "b")
    assert not (tmp_path / "b/app/src/main/assets/bad.vkb").exists()


def test_16k_pages_relayout_and_requirements(tmp_path, bundle_file, manifest):
    make_app(tmp_path / "p", "build.gradle.kts", KTS)
    result = package_android(bundle_file, tmp_path / "p", page_size=16384)
    assert result.relaid and result.weights_alignment == 16384
    shipped = read_bundle(result.asset)
    weights = shipped.sections[-1]
    assert weights.alignment == 16384 and weights.offset % 16384 == 0
    assert shipped.manifest == manifest
    original = read_bundle(bundle_file)
    assert bytes(shipped.weights) == bytes(original.weights)
    assert [bytes(m) for m in shipped.spirv] == [bytes(m) for m in original.spirv]
    req = json.loads(result.requirements.read_text())
    assert result.requirements.name == "model.requirements.json"
    assert req["format"] == "vkc-device-requirements" and req["bundle"] == "model.vkb"
    assert req["bundle_bytes"] == result.asset.stat().st_size
    assert req["weights"] == {"offset": weights.offset, "bytes": weights.size, "alignment": 16384}
    assert req["vulkan_api"] == "1.1.0" and req["extensions"] == [] and req["features"] == []
    limits = req["limits"]
    assert limits["maxComputeSharedMemorySize"] == 1024 and limits["maxComputeWorkGroupInvocations"] == 64
    assert limits["maxStorageBufferRange"] == 8192 and req["minStorageBufferOffsetAlignment_at_most"] == 256
    # already 16 KiB: not re-laid again
    assert not package_android(result.asset, tmp_path / "p", page_size=16384, name="again").relaid


def test_ensure_no_compress_directly(tmp_path):
    path = tmp_path / "build.gradle.kts"
    path.write_text("android {\n\tcompileSdk = 34\n}\n")
    result = ensure_no_compress(path)
    assert result.action == "added"
    assert path.read_text() == 'android {\n\tcompileSdk = 34\n\tandroidResources {\n\t\tnoCompress += "vkb"\n\t}\n}\n'


def test_cli_package_and_inspect_json(tmp_path, bundle_file):
    make_app(tmp_path / "cli", "build.gradle.kts", KTS)
    runner = CliRunner()
    out = runner.invoke(app, ["package", str(bundle_file), "--android", str(tmp_path / "cli"), "--page-size", "16384"])
    assert out.exit_code == 0, out.output
    assert "model.vkb" in out.output and "noCompress" in out.output
    unsafe = make_app(tmp_path / "cli2", "build.gradle.kts", UNSAFE["two android blocks"])
    out = runner.invoke(app, ["package", str(bundle_file), "--android", str(tmp_path / "cli2")])
    assert out.exit_code == 0, out.output
    assert 'noCompress += "vkb"' in out.output  # the snippet, printed
    assert (unsafe / "build.gradle.kts").read_text() == UNSAFE["two android blocks"]

    out = runner.invoke(app, ["inspect", str(bundle_file), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    facts = doc["facts"]
    assert doc["manifest"] == read_bundle(bundle_file).manifest
    assert facts["checksums_verified"] is True and facts["file_bytes"] == bundle_file.stat().st_size
    assert [s["kind"] for s in facts["sections"]] == ["MANIFEST", "SPIRV", "SPIRV", "WEIGHTS"]
    assert all(s["checksum_ok"] and s["checksum"].startswith("0x") for s in facts["sections"])
    assert facts["requirements"]["limits"]["maxComputeWorkGroupInvocations"] == 64
    assert facts["weights"]["alignment"] == 4096
    bad = tmp_path / "bad.vkb"
    bad.write_bytes(bundle_file.read_bytes()[:100])
    out = runner.invoke(app, ["inspect", str(bad), "--json"])
    assert out.exit_code == 1 and json.loads(out.output)["error"]["check"] == "file size"


def test_native_runtime_copied(tmp_path, bundle_file):
    """--native: the C runtime, vkb_reader.h, the JNI layer, its CMakeLists.txt and VkcModel.kt land in
    the app; the Gradle file keeps only the noCompress edit and the externalNativeBuild block is returned."""
    app = tmp_path / "NativeApp"
    module = make_app(app, "build.gradle.kts", KTS)
    result = package_android(bundle_file, app, native=True)
    cpp = module / "src/main/cpp/vkc"
    for rel in ("CMakeLists.txt", "vkc_jni.c", "include/vkc.h", "src/vkb_reader.h", "src/runtime.c", "src/json.c",
                "src/manifest.c", "src/spirv.c", "src/internal.h"):
        assert (cpp / rel).is_file() and cpp / rel in result.native, rel
    assert (module / "src/main/java/dev/vkc/VkcModel.kt").is_file()
    assert 'path = file("src/main/cpp/vkc/CMakeLists.txt")' in result.native_snippet
    assert "externalNativeBuild" not in (module / "build.gradle.kts").read_text()
    # the copied CMake file finds the sources beside it (the packaged layout), every one it compiles
    cmake = (cpp / "CMakeLists.txt").read_text()
    assert "EXISTS ${CMAKE_CURRENT_LIST_DIR}/src/runtime.c" in cmake
    compiled = re.findall(r"\$\{VKC_ROOT\}/(src/\w+\.c)", cmake)
    assert "src/generate.c" in compiled and all((cpp / rel).is_file() for rel in compiled), compiled
    plain = package_android(bundle_file, make_app(tmp_path / "Plain", "build.gradle.kts", KTS))
    assert plain.native == [] and not (plain.module / "src/main/cpp").exists()
