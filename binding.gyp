{
  "targets": [
    {
      "target_name": "mastra_opensandbox",
      "sources": ["<!@(node scripts/build.js --list-sources)"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "src"],
      "dependencies": ["<!(node -p \"require('node-addon-api').targets\"):node_addon_api_except"],
      "defines": ["NAPI_VERSION=8", "NODE_ADDON_API_DISABLE_DEPRECATED", "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS"],
      "cflags_c": ["-std=gnu11", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"],
      "cflags_cc": ["-std=gnu++17", "-Wall", "-Wextra"],
      "cflags": ["<!@(node scripts/build.js --cflags)"],
      "ldflags": ["<!@(node scripts/build.js --ldflags)"],
      "libraries": ["<!@(node scripts/build.js --libs)"]
    }
  ]
}
