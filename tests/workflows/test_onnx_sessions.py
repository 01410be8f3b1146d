"""The sessions a port is judged by: their threads sleep between runs, and give the bits that
ONNX Runtime's default, spinning, session gives."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from accuracy.workflows.model import onnx_graph

SIZE = 384  # large enough that ONNX Runtime splits the MatMul over its intra-op threads


def _linear():
    """y = x @ W + b, the MatMul a Linear exports to."""
    rng = np.random.Generator(np.random.PCG64(7))
    w, b = rng.standard_normal((SIZE, SIZE), dtype=np.float32), rng.standard_normal(SIZE, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [SIZE, SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [SIZE, SIZE])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_judging_session_sleeps_between_runs_and_gives_the_spinning_sessions_bits():
    import onnxruntime as ort

    model = _linear()
    x = np.random.Generator(np.random.PCG64(8)).standard_normal((SIZE, SIZE), dtype=np.float32)
    judging = onnx_graph.session(model, optimized=True)
    assert judging.get_session_options().get_session_config_entry(onnx_graph.NO_SPINNING) == "0"
    options = ort.SessionOptions()
    options.add_session_config_entry(onnx_graph.NO_SPINNING, "1")  # ONNX Runtime's default, said out loud
    spinning = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    for _ in range(3):
        assert onnx_graph.run(judging, {"x": x})["y"].tobytes() == spinning.run(None, {"x": x})[0].tobytes()
