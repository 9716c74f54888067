"""Fused CPU kernels for an exported graph: ONNX Runtime's transformer optimizer, after briskbert's packed qkv
(which the optimizer's attention matching misses) is placed in `Attention` nodes, found by their module paths."""

from __future__ import annotations

import ast
import contextlib
import copy
import io
import re
from pathlib import Path

SCOPES = "pkg.torch.onnx.name_scopes"
ATTENTION_SCOPE = re.compile(r".*\blayers\.\d+\.attention$")
MASK = "attention_mask_int32"


def scopes_of(node) -> list[str]:
    """The module paths (outermost first) the exporter recorded for a node; [] for nodes it made itself."""
    value = next((prop.value for prop in node.metadata_props if prop.key == SCOPES), "")
    return ast.literal_eval(value) if value else []  # the exporter writes a Python list of strings


def fuse_attention(model, num_heads: int) -> int:
    """Makes each attention module's output (its out projection's input) one Attention node over the qkv weight and
    bias, in place; returns how many. The optimizer that runs next prunes the nodes left without a consumer."""
    from onnx import helper, numpy_helper

    graph = model.graph
    mask = next((graph_input for graph_input in graph.input if graph_input.name == "attention_mask"), None)
    if mask is None or len(mask.type.tensor_type.shape.dim) != 2:  # the kernel takes a (batch, seq) mask
        return 0  # (multiple choice feeds (batch, choices, seq): its attention stays as exported)
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    nodes = [(node, scopes_of(node)) for node in graph.node]
    modules = sorted({scope for _, paths in nodes for scope in paths if ATTENTION_SCOPE.match(scope)})
    placed = {}
    for module in modules:
        qkv = [node for node, paths in nodes if f"{module}.qkv" in paths]
        out = [node for node, paths in nodes if f"{module}.out" in paths and node.op_type == "MatMul"]
        matmul = [node for node in qkv if node.op_type == "MatMul"]
        add = [node for node in qkv if node.op_type == "Add"]
        if len(matmul) != 1 or len(out) != 1 or matmul[0].input[1] not in initializers:
            continue
        weight = initializers[matmul[0].input[1]]
        bias = next((name for node in add for name in node.input if name in initializers), None)
        if add and bias is None:
            continue
        if bias is None:  # a projection without bias: the kernel takes zeros
            bias = f"{module}.qkv.zero_bias"
            graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(weight)[0] * 0, bias))
        attention = helper.make_node(
            "Attention",
            [matmul[0].input[0], weight.name, bias, MASK],
            [out[0].input[0]],
            name=f"{module}.fused",
            domain="com.microsoft",
            num_heads=num_heads,
        )
        attention.metadata_props.extend(matmul[0].metadata_props)  # keep_fp32 finds it by its module path
        placed[out[0].input[0]] = attention  # it takes the place of the node that made the attention output
    if not placed:
        return 0
    cast = helper.make_node("Cast", ["attention_mask"], [MASK], name="attention_mask_to_int32", to=6)
    nodes = [cast] + [
        next((placed[name] for name in node.output if name in placed), node) for node in graph.node
    ]
    nodes = [copy.deepcopy(node) for node in nodes]
    del graph.node[:]  # (this clears the messages still held: hence the copies)
    graph.node.extend(nodes)
    if not any(opset.domain == "com.microsoft" for opset in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return len(placed)


def optimize_onnx(source: Path, target: Path, config) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Writes the fused graph of `source` to `target`; returns the count of each fused kernel and every node's
    module paths by node name (the optimizer drops the paths, not the names)."""
    import onnx
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    external = Path(f"{source}.data").exists()  # past ONNX's 2 GB protobuf limit, as the export wrote it
    model = onnx.load(str(source))
    # ONNX Runtime's Attention kernel computes additive positions (or none), as many key/value heads as query
    # heads, every layer global.
    fusable = (
        config.position_embedding_type in ("absolute", "sinusoidal")
        and config.num_key_value_heads == config.num_attention_heads
        and config.sliding_window is None
    )
    attention = fuse_attention(model, config.num_attention_heads) if fusable else 0
    scopes = {node.name: scopes_of(node) for node in model.graph.node}
    # The optimizer reads a file: ONNX Runtime's own fusions run on it first.
    onnx.save(model, str(target), save_as_external_data=external)
    # The optimizer's own attention matching looks for separate q, k, v projections and finds none.
    options = FusionOptions("bert")
    options.enable_attention = False
    # Its shape inference prints and logs what it cannot infer (the caller quiets the logs); the fusions that need
    # shapes run anyway.
    with contextlib.redirect_stdout(io.StringIO()):
        optimized = optimizer.optimize_model(
            str(target),
            model_type="bert",
            num_heads=config.num_attention_heads,
            hidden_size=config.hidden_size,
            optimization_options=options,
            opt_level=2,
        )
    counts = {name: count for name, count in optimized.get_fused_operator_statistics().items() if count}
    counts["Attention"] = attention
    optimized.save_model_to_file(str(target), use_external_data_format=external)
    return counts, scopes
