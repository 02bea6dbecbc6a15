"""Issue 35's classes of bad input at the widgets' pure functions (size_report and its variants,
the share explorer's readings, the block pool's recordings and frames, the fill stepper, the
attention view): refused with the argument named, never a raw error from deep inside; the
stepper unchanged by a refused call; numpy arrays where lists belong accepted.
"""
import numpy as np
import pytest
from bad_input_helpers import cases, refused_case, works
from conftest import make_model, token_ids

from toykv import zoo
from toykv.widgets import SizeCalculator, attention_view as view
from toykv.widgets.attention_rows import attention_frame, attention_run, difference_text
from toykv.widgets.block_pool import (BlockPoolView, block_pool_data, block_pool_html,
                                      frame_html, record_pool)
from toykv.widgets.fill_stepper import FillStepper, record_frames
from toykv.widgets.share_explorer import ShareExplorer, check_models, readings
from toykv.widgets.size_report import (default_kv_heads, model_from_config_json, size_report,
                                       variant_model, variant_rows)

MODEL = make_model("gqa")
LLAMA = zoo.get("llama-3.1-8b")
RUN = record_pool(MODEL, [token_ids(5), token_ids(3, seed=1)], [3, 2], num_blocks=8)


def size_cases():
    return [
        (lambda: size_report(LLAMA, curve_contexts=8192), "curve_contexts", ()),
        (lambda: size_report(LLAMA, curve_contexts=[1.5]), "curve context", ()),
        (lambda: size_report(LLAMA, curve_contexts=range(10**9)), "curve_contexts", ()),
        (lambda: size_report(LLAMA, curve_contexts=None), "curve_contexts", ()),
        (lambda: size_report(LLAMA, curve_contexts=[]), "curve_contexts", ()),
        (lambda: size_report("llama-3.1-8b"), "model", ()),
        (lambda: size_report(LLAMA.config), "model", ()),
        (lambda: size_report(LLAMA, variant="gqa", kv_heads=1.5), "kv_heads", ()),
        (lambda: size_report(LLAMA, variant="gqa", kv_heads=3), "KV heads", ()),
        (lambda: size_report(LLAMA, bytes_per_value=0), "bytes_per_value", ()),
        (lambda: size_report(LLAMA, context=0), "context", ()),
        (lambda: size_report(LLAMA, batch=10**10), "batch", ()),
        (lambda: size_report(LLAMA, gpu_memory_gib=float("nan")), "gpu_memory_gib", ()),
        (lambda: size_report(LLAMA, variant="MHA"), "variant", ()),
        (lambda: variant_model("llama-3.1-8b", "mha"), "base", ()),
        (lambda: variant_model(LLAMA.config, "mha"), "base", ()),
        (lambda: variant_model(LLAMA, "mla2"), "variant", ()),
        (lambda: variant_model(LLAMA, "gqa", kv_heads=1.5), "kv_heads", ()),
        (lambda: variant_model(LLAMA, "gqa", kv_heads=0), "kv_heads", ()),
        (lambda: variant_model(LLAMA, "gqa", kv_heads="8"), "kv_heads", ()),
        (lambda: variant_rows("llama-3.1-8b"), "base", ()),
        (lambda: variant_rows(LLAMA, context=0), "context", ()),
        (lambda: variant_rows(LLAMA, batch="16"), "batch", ()),
        (lambda: variant_rows(LLAMA, kv_heads=1.5), "kv_heads", ()),
        (lambda: variant_rows(LLAMA, bytes_per_value=-2), "bytes_per_value", ()),
        (lambda: default_kv_heads("llama-3.1-8b"), "config", ()),
        (lambda: default_kv_heads(LLAMA), "config", ()),
        (lambda: model_from_config_json({"hidden_size": 4096}), "config_json", ()),
        (lambda: model_from_config_json("{"), "config.json", ()),
        (lambda: SizeCalculator(config_json={"hidden_size": 4096}), "config_json", ()),
        (lambda: SizeCalculator(model="paste a config.json", config_json=5), "config_json", ()),
    ]


def share_cases():
    return [
        (lambda: readings("llama-3.1-8b", 100_000), "models", ()),
        (lambda: readings(["llama-3.1-8b"], 12_345), "context", ()),
        (lambda: readings(["llama-3.1-8b"], 100_000.0), "context", ()),
        (lambda: readings(["llama-3.1-8b"], "100000"), "context", ()),
        (lambda: readings([], 100_000), "models", ()),
        (lambda: readings(["llama-3.1-8b"] * 2, 100_000), "models", ()),
        (lambda: readings(5, 100_000), "models", ()),
        (lambda: readings(["llama-3.1-8b"] * 7, 100_000), "models", ()),
        (lambda: readings([np.zeros(2)], 100_000), "models", ()),
        (lambda: readings(["llama-9"], 100_000), "llama-9", ()),
        (lambda: readings([8], 100_000), "models", ()),
        (lambda: check_models("llama-3.1-8b"), "models", ()),
        (lambda: ShareExplorer(models="llama-3.1-8b"), "models", ()),
        (lambda: ShareExplorer(context=100_000.0), "context", ()),
    ]


def pool_view_cases():
    prompts, outs = [token_ids(5), token_ids(3, seed=1)], [3, 2]
    last = len(RUN["frames"])
    return [
        (lambda: frame_html(RUN, last), "i", ()),
        (lambda: frame_html(RUN, -1), "i", ()),
        (lambda: frame_html(RUN, 1.5), "i", ()),
        (lambda: frame_html(RUN, "2"), "i", ()),
        (lambda: frame_html({}, 0), "run", ()),
        (lambda: frame_html("run", 0), "run", ()),
        (lambda: frame_html({"frames": [{}]}, 0), "run", ()),
        (lambda: record_pool(MODEL.config, prompts, outs, 8), "model", ()),
        (lambda: record_pool(MODEL, "12", outs, 8), "prompts", ()),
        (lambda: record_pool(MODEL, 12, outs, 8), "prompts", ()),
        (lambda: record_pool(MODEL, iter(prompts), outs, 8), "prompts", ()),
        (lambda: record_pool(MODEL, prompts, outs, 257), "num_blocks", ()),
        (lambda: record_pool(MODEL, prompts * 9, outs * 9, 24), "prompts", ()),
        (lambda: record_pool(MODEL, prompts, outs, 8, block_size=0), "block_size", ()),
        (lambda: record_pool(MODEL, prompts, outs, 8, batching="x"), "batching", ()),
        (lambda: record_pool(MODEL, prompts, [3], 8), "output_lens", ()),
        (lambda: record_pool(MODEL, prompts, outs, 8, max_batch=0), "max_batch", ()),
        (lambda: BlockPoolView(MODEL, prompts, outs, num_blocks="24"), "num_blocks", ()),
        (lambda: BlockPoolView(MODEL, prompts, outs, num_blocks=24.0), "num_blocks", ()),
        (lambda: block_pool_data("view"), "view", ()),
        (lambda: block_pool_html(None), "view", ()),
    ]


def stepper_cases():
    stepper = FillStepper(MODEL, prompt_len=3, max_positions=10, steps=2)
    return [
        (lambda: FillStepper(MODEL, prompt_len=0), "prompt_len", ()),
        (lambda: FillStepper(MODEL.config), "model", ()),
        (lambda: FillStepper(MODEL, kv_dtype="int4"), "kv_dtype", ()),
        (lambda: FillStepper(MODEL, max_positions=10**9), "max_positions", ()),
        (lambda: FillStepper(MODEL, prompt_len=1.5), "prompt_len", ()),
        (lambda: stepper.frame(attention="yes"), "attention", (stepper,)),
        (lambda: stepper.attention_frame(layer=5), "layer", (stepper,)),
        (lambda: stepper.attention_frame(head=1.5), "head", (stepper,)),
        (lambda: stepper.reset(0), "prompt_len", (stepper,)),
        (lambda: stepper.reset(100), "prompt_len", (stepper,)),
        (lambda: stepper.reset(2.0), "prompt_len", (stepper,)),
        (lambda: record_frames(MODEL, 3, 8, 0, attention="no"), "attention", ()),
        (lambda: record_frames(MODEL, 3, 300, 0), "max_positions", ()),
        (lambda: record_frames(MODEL.config, 3, 8, 0), "model", ()),
        (lambda: record_frames(MODEL, 3, 8, -1), "seed", ()),
    ]


def attention_cases():
    steps = attention_run(MODEL, token_ids(6), 4)
    frame = attention_frame(steps, 0, 0)
    return [
        (lambda: attention_frame([], 0, 0), "steps", ()),
        (lambda: attention_frame("steps", 0, 0), "steps", ()),
        (lambda: attention_frame(None, 0, 0), "steps", ()),
        (lambda: attention_frame(5, 0, 0), "steps", ()),
        (lambda: attention_frame(steps, 5, 0), "layer", ()),
        (lambda: attention_frame(steps, 0, -1), "head", ()),
        (lambda: attention_run(MODEL, token_ids(6), 0), "prompt_len", ()),
        (lambda: attention_run(MODEL, "12", 1), "tokens", ()),
        (lambda: attention_run(MODEL, token_ids(6), 2, kv_dtype="int4"), "kv_dtype", ()),
        (lambda: attention_run(MODEL.config, token_ids(6), 2), "model", ()),
        (lambda: view.heatmap_svg("frame", 8), "frame", ()),
        (lambda: view.heatmap_svg(frame, 2), "limit", ()),
        (lambda: view.heatmap_svg(frame, 1.5), "limit", ()),
        (lambda: view.view_html(frame, "8"), "limit", ()),
        (lambda: view.figures_html(None), "frame", ()),
        (lambda: view.new_row_html({}), "frame", ()),
        (lambda: view.caption_html(5), "frame", ()),
        (lambda: view.cell_size(0), "limit", ()),
        (lambda: view.cell_size(-3), "limit", ()),
        (lambda: view.cell_size(2.5), "limit", ()),
        (lambda: view.label_every(0), "limit", ()),
        (lambda: view.weight_colour(float("nan")), "weight", ()),
        (lambda: view.weight_colour("0.5"), "weight", ()),
        (lambda: view.weight_colour(1.5), "weight", ()),
        (lambda: difference_text("x"), "diff", ()),
        (lambda: difference_text(float("nan")), "diff", ()),
        (lambda: difference_text(-1.0), "diff", ()),
    ]


@pytest.mark.parametrize("make, i", cases(size_cases) + cases(share_cases)
                         + cases(pool_view_cases) + cases(stepper_cases)
                         + cases(attention_cases))
def test_the_widgets_functions_refuse_naming_the_argument(make, i):
    refused_case(make, i)


def test_numpy_arrays_work_where_lists_belong():
    report = works(lambda: size_report(LLAMA, curve_contexts=np.array([1024, 2048])))
    assert report.curve_contexts == (1024, 2048)
    rows = works(lambda: readings(np.array(["llama-3.1-8b", "qwen3-0.6b"]), np.int64(100_000)))
    assert [r["model"] for r in rows] == ["llama-3.1-8b", "qwen3-0.6b"]
    assert rows == readings(["llama-3.1-8b", "qwen3-0.6b"], 100_000)
    last = len(RUN["frames"]) - 1
    assert works(lambda: frame_html(RUN, np.int64(last))) == frame_html(RUN, last)
    frame = attention_frame(attention_run(MODEL, np.array(token_ids(6)), 4), 0, 0)
    assert works(lambda: view.view_html(frame, np.int64(8))) == view.view_html(frame, 8)
    assert view.weight_colour(np.float32(1.0)) == view.weight_colour(1) == view.CIVIDIS[-1]


def test_an_unknown_zoo_name_is_a_key_error_and_a_value_error():
    for call in (lambda: zoo.get("llama-9"), lambda: zoo.get(["llama"]),
                 lambda: readings(["llama-9"], 100_000)):
        with pytest.raises(KeyError, match="did you mean|known"):
            call()
        with pytest.raises(ValueError, match="no zoo model named"):
            call()
