// runner MODEL.pte INPUT.bin OUTPUT.bin
//
// Loads MODEL.pte with executorch::extension::Module, fills input 0 of
// "forward" from the raw bytes of INPUT.bin (shape and dtype come from the
// method meta), runs it and writes the raw bytes of output 0 to OUTPUT.bin.
// Exits non-zero on any error. Runtime log messages (e.g. "Missing operator")
// go to stderr through the runtime's default PAL.

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/platform/runtime.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

using executorch::extension::from_blob;
using executorch::extension::Module;
using executorch::runtime::Error;
using executorch::runtime::EValue;

static int fail(const char* what, Error err) {
  std::fprintf(stderr, "runner: %s failed: %s (0x%x)\n", what,
               executorch::runtime::to_string(err),
               static_cast<unsigned>(err));
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL.pte INPUT.bin OUTPUT.bin\n", argv[0]);
    return 2;
  }
  executorch::runtime::runtime_init();

  Module module(argv[1]);
  if (Error err = module.load(); err != Error::Ok) return fail("load", err);

  auto meta = module.method_meta("forward");
  if (!meta.ok()) return fail("method_meta(forward)", meta.error());
  auto in_meta = meta->input_tensor_meta(0);
  if (!in_meta.ok()) return fail("input_tensor_meta(0)", in_meta.error());

  std::ifstream in(argv[2], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "runner: cannot open %s\n", argv[2]);
    return 1;
  }
  std::vector<char> data((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  if (data.size() != in_meta->nbytes()) {
    std::fprintf(stderr, "runner: %s has %zu bytes, input 0 needs %zu\n",
                 argv[2], data.size(), in_meta->nbytes());
    return 1;
  }

  auto sizes = in_meta->sizes();
  auto input = from_blob(
      data.data(),
      std::vector<executorch::aten::SizesType>(sizes.begin(), sizes.end()),
      in_meta->scalar_type());

  auto outputs = module.forward(EValue(*input));
  if (!outputs.ok()) return fail("forward", outputs.error());
  if (outputs->empty() || !(*outputs)[0].isTensor()) {
    std::fprintf(stderr, "runner: output 0 is not a tensor\n");
    return 1;
  }
  const auto& out = (*outputs)[0].toTensor();

  std::ofstream os(argv[3], std::ios::binary);
  os.write(static_cast<const char*>(out.const_data_ptr()), out.nbytes());
  if (!os) {
    std::fprintf(stderr, "runner: cannot write %s\n", argv[3]);
    return 1;
  }
  return 0;
}
