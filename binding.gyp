{
  # The canonical build of the addon: `npm install` (through node-gyp-build),
  # `npm run build:native` and `npm run prebuildify` all drive this file.
  # CMakeLists.txt builds the same addon for the opt-in CUDA build.
  "targets": [
    {
      "target_name": "hora",
      # Every .cc under native/src and native/binding, found when configuring.
      "sources": [
        "<!@(node scripts/list-sources.js)"
      ],
      "include_dirs": [
        "native/src",
        "<!(node -p \"require('node-addon-api').include_dir\")"
      ],
      "defines": [
        "NAPI_VERSION=8",
        "NAPI_CPP_EXCEPTIONS"
      ],
      # node's common.gypi turns exceptions and RTTI off and picks gnu++17;
      # the core uses exceptions across the Napi boundary, so undo that.
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++17", "-std=gnu++20"],
      # -ffp-contract=off: no fused multiply-add where the source has a product and a sum, so a scaled
      # reduction (prescaleFactor) rounds the same on every CPU and as the JS reference does.
      "cflags": ["-fPIC", "-Wall", "-Wextra", "-pthread", "-ffp-contract=off"],
      "cflags_cc": ["-std=c++17", "-fexceptions", "-frtti", "-fPIC", "-Wall", "-Wextra", "-pthread", "-ffp-contract=off"],
      "ldflags": ["-pthread"],
      "configurations": {
        "Release": {
          "cflags": ["-O3"],
          "cflags_cc": ["-O3"]
        }
      },
      "conditions": [
        ["OS=='linux'", {
          "libraries": ["-lrt", "-pthread"]
        }],
        ["OS=='mac'", {
          "xcode_settings": {
            "GCC_ENABLE_CPP_EXCEPTIONS": "YES",
            "GCC_ENABLE_CPP_RTTI": "YES",
            "CLANG_CXX_LANGUAGE_STANDARD": "c++17",
            "MACOSX_DEPLOYMENT_TARGET": "11.0"
          }
        }]
      ]
    }
  ]
}
