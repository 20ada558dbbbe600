// Test fixture: a stand-in for the pre-1.5 `libquantized_ops_aot_lib.so`.
//
// Before ExecuTorch 1.5 the quantized export plugin carried its *own* copy of
// the quantized kernels and registered them itself.  Loading it in the same
// process as `libexecutorch_kernels_quantized.so` (which registers the same
// operator names into the same registry, owned by `libexecutorch.so`) made the
// runtime abort with:
//
//     Re-registering quantized_decomposed::add.out, from ...
//
// This library reproduces exactly that shape, compiled against the wheel's
// own headers and linked ONLY to the wheel's `libexecutorch.so` (it imports
// `executorch::runtime::register_kernels`, it does not define it):
//
//   * a static, constant-initialised table of `executorch::runtime::Kernel`
//     (24-byte entries: name_ at +0, kernel_key_ at +8, op_ at +16), the way
//     generated RegisterCodegenUnboxedKernels code does it, so a binary
//     analyser sees R_X86_64_RELATIVE relocations for the name pointer (+0)
//     and the function pointer (+16) of every entry;
//   * a static initialiser that hands the table to `register_kernels`.
//
// The kernels are stubs: they are never run (the process aborts first).

#include <executorch/runtime/kernel/kernel_runtime_context.h>
#include <executorch/runtime/kernel/operator_registry.h>

namespace {

using ::executorch::runtime::Error;
using ::executorch::runtime::EValue;
using ::executorch::runtime::Kernel;
using ::executorch::runtime::KernelRuntimeContext;
using ::executorch::runtime::Span;

// Each stub is a distinct function (distinct body) so that identical-code
// folding cannot merge them: every table entry gets its own function pointer.
template <int kOpIndex>
void stub_kernel(KernelRuntimeContext& context, Span<EValue*> stack) {
  (void)stack;
  static volatile int calls = kOpIndex; // distinct per instantiation
  calls = calls + 1;
  context.fail(Error::NotImplemented);
}

// Same names as libexecutorch_kernels_quantized.so registers.  add.out first,
// so the abort message names it whichever library is loaded second.
__attribute__((used)) static const Kernel kDupKernels[] = {
    Kernel("quantized_decomposed::add.out", &stub_kernel<0>),
    Kernel("quantized_decomposed::quantize_per_tensor.out", &stub_kernel<1>),
    Kernel("quantized_decomposed::dequantize_per_tensor.out", &stub_kernel<2>),
    Kernel("quantized_decomposed::embedding_byte.out", &stub_kernel<3>),
};

// Static initialiser: runs when the library is dlopen()ed.
__attribute__((used)) const Error kDupRegistration =
    ::executorch::runtime::register_kernels(
        Span<const Kernel>(kDupKernels, sizeof(kDupKernels) / sizeof(Kernel)));

} // namespace
