"""Make the quantized model test fixture in splitter/checks/model/.

Builds a tiny Linear-ReLU-add-Linear model (a residual add around the ReLU),
quantizes it with the XNNPACK quantizer (symmetric, per-tensor) through
torchao's pt2e flow, lowers it with ``executorch.exir.to_edge`` and no
partitioner (so the quantize/dequantize ops stay as ``quantized_decomposed``
kernels), and runs the resulting program through ExecuTorch's own Python
runtime.

Writes to OUTDIR:
  model.pte            the ExecuTorch program
  input0.bin           the input, raw little-endian float32, C-contiguous
  expected_output0.bin the runtime's output, same encoding
  model.json           shapes, dtypes, operator table, versions, pte sha256

Needs torch==2.13.0 and executorch==1.5.1, kept out of the project's own
environment:

  python3 -m venv .venv-model
  .venv-model/bin/pip install torch==2.13.0 executorch==1.5.1
  .venv-model/bin/python ci/make_model.py splitter/checks/model

The output is deterministic: two runs give byte-identical files.
"""

import hashlib
import json
import sys
from pathlib import Path

# Registers the quantized_decomposed .out kernels: to_executorch() needs them
# as out variants, and the runtime fails with "Missing operator" without them.
import executorch.kernels.quantized  # noqa: F401
import torch
from torch import nn

QUANT_OPS = (
    "quantized_decomposed::quantize_per_tensor.out",
    "quantized_decomposed::dequantize_per_tensor.out",
)


class TinyModel(nn.Module):
    """8 -> 16 -> 4 features: Linear, ReLU with a residual add, Linear."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(torch.relu(h) + h)


def build_program(model, example):
    """Quantize, export and lower the model; return the ExecutorchProgramManager."""
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from executorch.exir import to_edge
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=False)
    )
    graph = torch.export.export(model, example).module()
    prepared = prepare_pt2e(graph, quantizer)
    prepared(*example)  # calibrate
    quantized = convert_pt2e(prepared)
    return to_edge(torch.export.export(quantized, example)).to_executorch()


def operator_names(program):
    """Return the operator table of the program's first execution plan."""
    plan = program.executorch_program.execution_plan[0]
    return [f"{op.name}.{op.overload}" if op.overload else op.name for op in plan.operators]


def run_pte(pte_path, inputs):
    """Run the .pte's forward method with ExecuTorch's Python runtime."""
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(Path(pte_path)).load_method("forward")
    return method.execute(inputs)


def main(outdir):
    """Build the fixture into outdir."""
    import executorch.version

    torch.manual_seed(0)
    model = TinyModel().eval()
    example = (torch.randn(2, 8),)

    program = build_program(model, example)
    ops = operator_names(program)
    missing = [op for op in QUANT_OPS if op not in ops]
    if missing:
        sys.exit(f"operator table lacks {missing}: {ops}")

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    pte = out / "model.pte"
    pte.write_bytes(program.buffer)

    (output,) = run_pte(pte, example)
    # '<f4' pins little-endian whatever the host.
    (out / "input0.bin").write_bytes(example[0].contiguous().numpy().astype("<f4").tobytes())
    (out / "expected_output0.bin").write_bytes(output.contiguous().numpy().astype("<f4").tobytes())

    meta = {
        "inputs": [{"shape": list(example[0].shape), "dtype": "float32", "file": "input0.bin"}],
        "outputs": [
            {"shape": list(output.shape), "dtype": "float32", "file": "expected_output0.bin"}
        ],
        "operators": ops,
        "torch": torch.__version__.split("+")[0],
        "executorch": executorch.version.__version__.split("+")[0],
        "pte_sha256": hashlib.sha256(pte.read_bytes()).hexdigest(),
    }
    (out / "model.json").write_text(json.dumps(meta, indent=2) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
