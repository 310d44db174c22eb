"""Where a compiled step's time goes: its HLO ops, a profiler trace, a fit.

Used by `benchmarks/accelerator_step.py --profile`. Three views of one step:

  * `kernel_counts`: what the compiled HLO launches per step, by category
    (matmuls, cuDNN attention, fusions, copies, collectives, ...). Needs no
    trace, so it works on any backend.
  * `trace_op_times`: device time per HLO op, read from the `*.xplane.pb`
    that `jax.profiler.trace` writes, with `jax.profiler.ProfileData` (part of
    jaxlib: no TensorBoard or xprof needed). On a GPU the kernels sit on the
    `/device:GPU:N` planes; on CPU the thunks on the `/host:CPU` plane.
  * `linear_fit`: step time = fixed + per_token x tokens, from steps timed at
    two or more batch sizes. A large `fixed` is time no batch amortises:
    kernel launches, host work, per-parameter optimizer kernels.

Imports only jax and numpy (it runs on a bare accelerator machine).
"""

import collections
import dataclasses
import pathlib
import re
from typing import Iterable, Mapping, Optional, Sequence

import jax
import numpy as np

# Instructions that launch no kernel (or only hold others).
_NO_KERNEL = frozenset((
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast",
    "after-all", "partition-id", "replica-id", "opt-barrier",
    "add-dependency", "domain"))
_CONTROL_FLOW = frozenset(("while", "conditional", "call", "async-start",
                           "async-update", "async-done"))
_COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                "collective-permute", "collective-broadcast")
_MATMUL_OPS = frozenset(("dot", "convolution", "ragged-dot"))

_HEADER = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_CALLED = re.compile(
    r"\b(calls|body|condition|to_apply|true_computation|false_computation)"
    r"=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TARGET = re.compile(r'custom_call_target="([^"]*)"')
_KIND = re.compile(r"\bkind=(k\w+)")
_BACKEND_KIND = re.compile(r'"kind":"([^"]+)"')


@dataclasses.dataclass(frozen=True)
class HloOp:
  """One instruction of a compiled module."""
  name: str
  opcode: str
  category: str
  computation: str


def _split_instruction(line: str) -> Optional[tuple[str, str, str]]:
  """`%name = type opcode(operands), attrs` -> (name, opcode, rest)."""
  text = line.strip()
  if text.startswith("ROOT "):
    text = text[5:]
  name, eq, rhs = text.partition(" = ")
  if not eq or not name.lstrip("%"):
    return None
  rhs = rhs.lstrip()
  if rhs.startswith("("):  # a tuple type: skip to its closing parenthesis
    depth = 0
    for i, ch in enumerate(rhs):
      depth += (ch == "(") - (ch == ")")
      if depth == 0:
        rhs = rhs[i + 1:]
        break
  else:
    rhs = rhs.partition(" ")[2]
  opcode, paren, rest = rhs.strip().partition("(")
  if not paren or not re.fullmatch(r"[\w\-]+", opcode):
    return None
  return name.lstrip("%"), opcode, rest


def _parse(hlo_text: str):
  """Computations -> [(name, opcode, rest)], and the entry's name."""
  computations, entry, current = {}, None, None
  for line in hlo_text.splitlines():
    if not line.startswith(" "):
      header = _HEADER.match(line)
      current = header.group(1) if header else None
      if current is not None:
        computations[current] = []
        if line.startswith("ENTRY"):
          entry = current
      continue
    if current is not None and (inst := _split_instruction(line)):
      computations[current].append(inst)
  return computations, entry


def _category(opcode: str, rest: str, computations) -> str:
  if opcode == "custom-call":
    target = (_TARGET.search(rest) or [None, "?"])[1]
    low = target.lower()
    if "fmha" in low or ("cudnn" in low and "attention" in low):
      return "attention (cuDNN)"
    if "gemm" in low or "matmul" in low or "cublas" in low:
      return "matmul"
    return f"custom-call {target}"
  if opcode in _MATMUL_OPS:
    return "matmul"
  if opcode.startswith(_COLLECTIVES):
    return "collective"
  if opcode in ("copy", "transpose", "copy-start", "copy-done"):
    return "copy/transpose"
  if opcode == "fusion":
    called = _CALLED.search(rest)
    body = computations.get(called.group(2), []) if called else []
    body_ops = {op for _, op, _ in body}
    backend_kind = (_BACKEND_KIND.search(rest) or [None, ""])[1]
    if body_ops & _MATMUL_OPS or "gemm" in backend_kind:
      return "matmul"
    if "cudnn" in backend_kind:
      return "cuDNN fusion"
    if "scatter" in body_ops:
      return "scatter"  # e.g. an embedding gradient
    if body and body[-1][1] in ("copy", "transpose"):
      return "copy/transpose"
    kind = (_KIND.search(rest) or [None, "?"])[1]
    if kind == "kCustom":
      return f"custom fusion {backend_kind or '?'}"
    return {"kLoop": "elementwise fusion", "kInput": "reduction fusion",
            "kOutput": "output fusion"}.get(kind, f"fusion {kind}")
  if opcode in _CONTROL_FLOW:
    return "control flow"
  return opcode


def hlo_ops(hlo_text: str) -> dict[str, HloOp]:
  """Every instruction of the executed computations, by name.

  Executed computations are the entry and, from there, the bodies of
  while loops, conditionals and calls (XLA:GPU's command buffers are
  calls); fusion bodies and reducers run inside the op that calls them.
  """
  computations, entry = _parse(hlo_text)
  executed, todo = [], [entry] if entry else []
  while todo:
    name = todo.pop()
    if name in executed or name not in computations:
      continue
    executed.append(name)
    for _, opcode, rest in computations[name]:
      if opcode in _CONTROL_FLOW:
        todo += [m.group(2) for m in _CALLED.finditer(rest)]
        for branches in _BRANCHES.findall(rest):
          todo += [b.strip().lstrip("%") for b in branches.split(",")]
  ops = {}
  for comp in executed:
    for name, opcode, rest in computations[comp]:
      ops[name] = HloOp(name, opcode, _category(opcode, rest, computations),
                        comp)
  return ops


def module_name(hlo_text: str) -> str:
  first = hlo_text.split("\n", 1)[0]
  return first.split()[1].rstrip(",") if first.startswith("HloModule") else ""


def kernel_counts(ops: dict[str, HloOp]) -> collections.Counter:
  """Kernel-launching instructions by category (a while body counts once)."""
  return collections.Counter(
      op.category for op in ops.values()
      if op.opcode not in _NO_KERNEL and op.opcode not in _CONTROL_FLOW)


def latest_xplane(trace_dir: str) -> pathlib.Path:
  """The newest `*.xplane.pb` that `jax.profiler.trace(trace_dir)` wrote."""
  found = sorted(pathlib.Path(trace_dir).glob("plugins/profile/*/*.xplane.pb"),
                 key=lambda p: p.stat().st_mtime)
  if not found:
    raise FileNotFoundError(f"no plugins/profile/*/*.xplane.pb in {trace_dir}")
  return found[-1]


def _stats(event) -> dict:
  return {k: v for k, v in event.stats}


def _lines(plane):
  """The lines of a plane that hold op or kernel events, not summaries."""
  lines = list(plane.lines)
  for wanted in ("XLA Ops", "Stream"):  # TPU/derived first, then CUDA streams
    chosen = [l for l in lines if l.name.startswith(wanted)]
    if chosen:
      return chosen
  return [l for l in lines if l.name not in ("XLA Modules", "Steps")]


def trace_op_times(xplane: pathlib.Path, ops: dict[str, HloOp],
                   module: str) -> dict[str, tuple[str, float]]:
  """Traced nanoseconds per op, for one module: {label: (category, ns)}.

  Device planes (`/device:...`, a GPU's kernels on its stream lines) are
  used when they hold events; otherwise the host plane's thunk events
  (XLA:CPU). An event belongs to the op its `hlo_op` stat names (XLA
  annotates each kernel launch with it), or to the op it is named after.
  Host thunks of control flow (a while loop) contain their body's thunks
  and are left out; a kernel on a GPU stream whose op is control flow (a
  command buffer, i.e. a CUDA graph) keeps its kernel name, as do device
  kernels that name no op.
  """
  data = jax.profiler.ProfileData.from_file(str(xplane))
  planes = [p for p in data.planes if p.name.startswith("/device:")]
  on_device = any(e for p in planes for l in _lines(p) for e in l.events)
  if not on_device:
    planes = [p for p in data.planes if p.name.startswith("/host:")]
  times = collections.defaultdict(float)
  categories = {}
  for plane in planes:
    for line in (_lines(plane) if on_device else plane.lines):
      # Op lines (host thunks, a TPU's or xprof's "XLA Ops") nest a loop's
      # body inside the loop's own event; stream lines hold only kernels.
      nests = not line.name.startswith("Stream")
      for event in line.events:
        if event.name.startswith("end: "):
          continue
        stats = _stats(event)
        if module and not str(stats.get("hlo_module", module)).startswith(
            module):
          continue  # another jitted function
        op = ops.get(str(stats.get("hlo_op", event.name)))
        if op is None and not on_device:
          continue  # host bookkeeping: Python, PjRt, thread pools
        if op is not None and op.opcode in _CONTROL_FLOW:
          if nests:
            continue
          label, category = event.name, "kernel (command buffer)"
        elif op is None:
          op = ops.get(_hlo_name_of_kernel(event.name))
          label = event.name if op is None else op.name
          category = (kernel_category(event.name) if op is None
                      else op.category)
        else:
          label, category = op.name, op.category
        times[label] += event.duration_ns
        categories[label] = category
  return {label: (categories[label], ns) for label, ns in times.items()}


# Library kernels a GPU trace names by themselves (no HLO op of that name),
# first match wins: cuBLAS's Hopper GEMMs (nvjet_*, sm90_xmma_*), CUTLASS,
# XLA's Triton GEMM fusions, cuDNN's fused attention.
_KERNEL_CATEGORIES = (
    (re.compile(r"sdpa|fmha|flash", re.I), "attention (cuDNN)"),
    (re.compile(r"nvjet|xmma|gemm|cutlass|cublas|matmul", re.I), "matmul"),
    (re.compile(r"scatter", re.I), "scatter"),
    (re.compile(r"^(loop_|wrapped_)"), "elementwise fusion"),
    (re.compile(r"^input_"), "reduction fusion"),
    (re.compile(r"copy|transpose", re.I), "copy/transpose"),
)


def _hlo_name_of_kernel(kernel: str) -> str:
  """XLA:GPU names a fusion's kernel after it with '.' made '_':
  `input_scatter_fusion_2` is the kernel of `input_scatter_fusion.2`."""
  return re.sub(r"_(\d+)$", r".\1", kernel)


def kernel_category(kernel: str) -> str:
  """The category of a traced GPU kernel that names no HLO op."""
  for pattern, category in _KERNEL_CATEGORIES:
    if pattern.search(kernel):
      return category
  return "other kernel"


def top_ops_table(times: dict[str, tuple[str, float]], steps: int,
                  step_s: float, top: int = 15) -> str:
  """Markdown: the ops with the most time per step, then per category."""
  total = sum(ns for _, ns in times.values()) or float("nan")
  per_step = lambda ns: ns / steps / 1e6  # pylint: disable=unnecessary-lambda-assignment
  lines = [f"traced op time {per_step(total):.3f} ms/step of a "
           f"{step_s * 1e3:.3f} ms step ({total / steps / 1e9 / step_s:.0%}; "
           "below 100%: launch gaps or host work; above: ops overlapping)",
           "| op | category | ms/step | share |", "|---|---|---|---|"]
  ranked = sorted(times.items(), key=lambda kv: -kv[1][1])
  for label, (category, ns) in ranked[:top]:
    lines.append(f"| {label[:60]} | {category} | {per_step(ns):.3f} | "
                 f"{ns / total:.1%} |")
  by_category, count = collections.Counter(), collections.Counter()
  for category, ns in times.values():
    by_category[category] += ns
    count[category] += 1
  lines += ["", "| category | ops | ms/step | share |", "|---|---|---|---|"]
  for category, ns in by_category.most_common():
    lines.append(f"| {category} | {count[category]} | {per_step(ns):.3f} | "
                 f"{ns / total:.1%} |")
  return "\n".join(lines)


def linear_fit(tokens: Sequence[int], seconds: Sequence[float]
               ) -> tuple[float, float]:
  """Least squares `seconds = fixed + per_token * tokens`.

  Returns:
    (fixed seconds, seconds per token). Needs two distinct token counts.
  """
  if len(set(tokens)) < 2:
    raise ValueError(f"a fit needs two distinct token counts, got {tokens}")
  per_token, fixed = np.polyfit(np.asarray(tokens, float),
                                np.asarray(seconds, float), 1)
  return float(fixed), float(per_token)


def counts_line(counts: Mapping[str, int]) -> str:
  """`{"matmul": 3, "copy/transpose": 5}` -> "5 copy/transpose, 3 matmul"."""
  return ", ".join(f"{c} {n}" for n, c in collections.Counter(
      counts).most_common())


def leaves(tree) -> int:
  return len(jax.tree_util.tree_leaves(tree))


def fit_table(rows: Iterable[dict], fixed_s: float, per_token_s: float) -> str:
  """Markdown: each timed batch size and the fitted line."""
  resolved = per_token_s > 0 and fixed_s >= 0
  lines = ["| batch | tokens | step ms (median) | fit ms | fixed share |",
           "|---|---|---|---|---|"]
  for r in rows:
    fit = fixed_s + per_token_s * r["tokens"]
    share = f"{fixed_s / r['step_s']:.0%}" if resolved else "—"
    lines.append(f"| {r['batch']} | {r['tokens']} | {r['step_s'] * 1e3:.3f} | "
                 f"{fit * 1e3:.3f} | {share} |")
  line = (f"fit: step = {fixed_s * 1e3:.3f} ms fixed + "
          f"{per_token_s * 1e6:.4f} us/token")
  if resolved:
    line += (f" ({1 / per_token_s:.0f} tokens/s once the fixed part is "
             "amortised)")
  else:
    line += (" -- not resolved: step time did not grow with the batch as a "
             "line through positive numbers would (noise? time more --steps)")
  return "\n".join(lines + [line])
