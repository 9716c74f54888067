"""Fused CPU kernels for an exported encoder graph: ONNX Runtime's transformer optimizer (`model_type="bert"`).

The optimizer finds BERT's attention by its separate q, k, v projections; briskbert's one qkv projection is the
packed weight of ONNX Runtime's `Attention` kernel, so each `layers.N.attention` (by the module path the exporter
records on every node) becomes one `com.microsoft.Attention` node here first, where the kernel can express it.
Not remote code.
"""

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
OPTIMIZER_LOGGERS = ("onnxruntime.transformers", "root")


def scopes_of(node) -> list[str]:
    """The module paths (outermost first) the exporter recorded for a node; [] for nodes it made itself."""
    value = next((prop.value for prop in node.metadata_props if prop.key == SCOPES), "")
    try:
        return [scope for scope in ast.literal_eval(value) if isinstance(scope, str)] if value else []
    except (ValueError, SyntaxError):
        return []


def attention_fusable(config) -> bool:
    """Whether ONNX Runtime's Attention kernel computes this model's attention: additive positions (or none), as
    many key/value heads as query heads, every layer global."""
    return (
        config.position_embedding_type in ("absolute", "sinusoidal")
        and config.num_key_value_heads == config.num_attention_heads
        and config.sliding_window is None
    )


def fuse_attention(model, num_heads: int) -> int:
    """Replaces each attention module's nodes (all but its output projection) by one Attention node; returns how
    many were fused. `model` is an onnx ModelProto, changed in place."""
    from onnx import helper, numpy_helper

    graph = model.graph
    mask = next((graph_input for graph_input in graph.input if graph_input.name == "attention_mask"), None)
    if mask is None or len(mask.type.tensor_type.shape.dim) != 2:  # the kernel takes a (batch, seq) mask
        return 0  # (multiple choice feeds (batch, choices, seq): its attention stays as exported)
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    modules = sorted(
        {scope for node in graph.node for scope in scopes_of(node) if ATTENTION_SCOPE.match(scope)}
    )
    fused, placed = 0, {}
    for module in modules:
        inside = [node for node in graph.node if module in scopes_of(node)]
        qkv = [node for node in inside if f"{module}.qkv" in scopes_of(node)]
        out = [node for node in inside if f"{module}.out" in scopes_of(node) and node.op_type == "MatMul"]
        matmul = [node for node in qkv if node.op_type == "MatMul"]
        add = [node for node in qkv if node.op_type == "Add"]
        if len(matmul) != 1 or len(out) != 1 or matmul[0].input[1] not in initializers:
            continue
        weight = initializers[matmul[0].input[1]]
        if add and not any(name in initializers for name in add[0].input):
            continue
        if add:
            bias = next(name for name in add[0].input if name in initializers)
        else:  # a projection without bias: the kernel takes zeros
            bias = f"{module}.qkv.zero_bias"
            zeros = numpy_helper.to_array(weight)[0] * 0
            graph.initializer.append(numpy_helper.from_array(zeros, bias))
        attention = helper.make_node(
            "Attention",
            [matmul[0].input[0], weight.name, bias, MASK],
            [out[0].input[0]],
            name=f"{module}.fused",
            domain="com.microsoft",
            num_heads=num_heads,
        )
        attention.metadata_props.extend(matmul[0].metadata_props)  # keep_fp32 finds it by its module path
        # The node that made the attention output is replaced; what only it needed becomes dead and goes.
        placed[out[0].input[0]] = attention
        fused += 1
    if not fused:
        return 0
    nodes = [helper.make_node("Cast", ["attention_mask"], [MASK], name="attention_mask_to_int32", to=6)]
    nodes += [next((placed[name] for name in node.output if name in placed), node) for node in graph.node]
    kept = [copy.deepcopy(node) for node in drop_dead_nodes(nodes, [output.name for output in graph.output])]
    del graph.node[:]  # (this clears the messages still held: hence the copies)
    graph.node.extend(kept)
    used = {name for node in kept for name in node.input}
    unused = [tensor for tensor in graph.initializer if tensor.name not in used]
    for tensor in unused:
        graph.initializer.remove(tensor)
    if not any(opset.domain == "com.microsoft" for opset in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return fused


def drop_dead_nodes(nodes: list, outputs: list[str]) -> list:
    """The nodes some graph output depends on, in their order (the replaced attention's leftovers go)."""
    needed, kept = set(outputs), []
    for node in reversed(nodes):
        if any(name in needed for name in node.output):
            kept.append(node)
            needed.update(name for name in node.input if name)
    return kept[::-1]


def optimize_onnx(source: Path, target: Path, config) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Writes the fused graph of `source` to `target`; returns the count of each fused kernel, and the module
    paths of every node (the optimizer drops them; node names survive, so --keep_fp32 still finds its nodes)."""
    import onnx
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    external = Path(f"{source}.data").exists()  # past ONNX's 2 GB protobuf limit, as the export wrote it
    model = onnx.load(str(source))
    attention = fuse_attention(model, config.num_attention_heads) if attention_fusable(config) else 0
    scopes = {node.name: scopes_of(node) for node in model.graph.node}
    onnx.save(
        model, str(target), save_as_external_data=external
    )  # the optimizer reads a file: ONNX Runtime's own fusions run on it first
    # The optimizer's own attention matching looks for separate q, k, v projections and finds none.
    options = FusionOptions("bert")
    options.enable_attention = False
    # Its shape inference prints what it cannot infer (callers quiet its loggers, OPTIMIZER_LOGGERS); the fusions
    # that need shapes run anyway.
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
