"""The Recipe section (issue 21): torch.compile, float8, activation offload, the optimizer step in backward and the
loss, each reaching the link, the header line and the core's report; a control shows only where its recipe is
valid."""

from tests.app_helpers import assert_overview_matches_core, core_report, header_text, run_app


def switch(at, key):
    """A boolean field's widget (the app draws them as toggles or checkboxes)."""
    return next(w for w in list(at.toggle) + list(at.checkbox) if w.key == key)


def switches(at) -> set:
    return {w.key for w in list(at.toggle) + list(at.checkbox)}


def test_recipe_controls_reach_the_link_the_header_and_the_core():
    at = run_app({"model": "llama-3-8b", "recompute": "op"}, sections=["sec_recipe"])
    assert "compile" in switches(at) and "activation_offload" not in switches(at)   # offloading: full recompute
    assert "loss_chunks" not in [w.key for w in at.number_input]         # only with a chunked loss
    switch(at, "compile").set_value(True).run()
    at.selectbox(key="loss").set_value("chunked").run()
    at.number_input(key="loss_chunks").set_value(16).run()
    at.selectbox(key="float8").set_value("tensorwise").run()
    query = dict(at.query_params)
    assert {k: query[k] for k in ("recompute", "compile", "loss", "loss_chunks", "float8")} == {
        "recompute": "op", "compile": "true", "loss": "chunked", "loss_chunks": "16", "float8": "tensorwise"}
    report = core_report(query)
    assert report["recipe"] == ("op-level selective checkpointing, torch.compile'd blocks, float8 linears "
                                "(tensorwise), torchtune's chunked cross entropy (16 chunks)")
    assert f"recipe: {report['recipe']}" in header_text(at)
    assert_overview_matches_core(at, report)


def test_offload_and_the_fused_step_show_where_torchtune_allows_them():
    at = run_app({"model": "llama-3-8b", "recompute": "full"}, sections=["sec_recipe"])
    for key in ("activation_offload", "optimizer_in_backward"):
        switch(at, key).set_value(True).run()
    query = dict(at.query_params)
    report = core_report(query)
    assert report["activation_offload_host_bytes"] > 0
    assert "activations offloaded to the CPU, optimizer step in backward" in report["recipe"]
    peak_tab = run_app(query, tab="Peak and step")
    host = next(c.value for c in peak_tab.caption if c.value.startswith("Host memory"))
    row = report["host_memory"][int(query.get("stage", 3))]
    assert "offloaded activations" in host and f"per node of {row['gpus_per_node']} GPUs" in host
    assert row["per_worker_bytes"] == row["offload_bytes_per_worker"] + report["activation_offload_host_bytes"]
    at = run_app({"model": "llama-3-8b", "micro_batches": "4"}, sections=["sec_recipe"])
    assert "optimizer_in_backward" not in switches(at)
    assert any("gradient accumulation" in c.value for c in at.caption)


def test_a_policy_of_your_own_reaches_the_link_and_the_core():
    # torch's create_selective_checkpoint_contexts with a user policy: the op kinds it saves, ticked in the app
    at = run_app({"model": "llama-3-8b", "recompute": "op"}, sections=["sec_recipe"])
    assert "op_saves" not in [w.key for w in at.multiselect]
    at.selectbox(key="op_policy").set_value("own").run()
    at.multiselect(key="op_saves").set_value(["mm", "attention"]).run()
    query = dict(at.query_params)
    assert (query["op_policy"], query["op_saves"]) == ("own", "mm,attention")
    report = core_report(query)
    assert report["workload"]["op_policy"] == "save:mm,attention"
    assert "your policy: saves mm, attention" in report["recipe"]
    assert_overview_matches_core(at, report)


def test_megatrons_modules_and_method_reach_the_link_and_the_core():
    # Megatron's --recompute-modules under selective recompute, its --recompute-method under full
    at = run_app({"model": "deepseek-v2-lite", "recompute": "selective"}, sections=["sec_recipe"])
    assert "recompute_method" not in [w.key for w in at.selectbox]
    at.multiselect(key="recompute_modules").set_value(["core_attn", "moe", "layernorm"]).run()
    query = dict(at.query_params)
    assert query["recompute_modules"] == "core_attn,moe,layernorm"
    report = core_report(query)
    assert report["workload"]["recompute_modules"] == "core_attn,layernorm,moe"
    assert report["recipe"] == "selective recompute of Megatron's modules core_attn, layernorm, moe"
    assert f"recipe: {report['recipe']}" in header_text(at)
    assert_overview_matches_core(at, report)                 # MoE: the bars per group add up to the core's
    at = run_app({"model": "llama-3-8b", "recompute": "full"}, sections=["sec_recipe"])
    assert "recompute_modules" not in [w.key for w in at.multiselect]
    at.selectbox(key="recompute_method").set_value("block").run()
    at.number_input(key="recompute_num_layers").set_value(8).run()
    assert "activation_offload" not in switches(at)          # torchtune offloads every block's input only
    query = dict(at.query_params)
    assert (query["recompute_method"], query["recompute_num_layers"]) == ("block", "8")
    report = core_report(query)
    assert report["recipe"] == "full recompute, Megatron's block method: the first 8 blocks of each chunk"
    assert_overview_matches_core(at, report)


def test_multi_token_prediction_reaches_the_link_and_the_core():
    # DeepSeek-V3's config declares one MTP module; the page trains none until asked (Megatron --mtp-num-layers)
    from zerocalc.model.inventory import param_count
    from zerocalc.model.presets import MODEL_PRESETS

    at = run_app({"model": "deepseek-v3", "workers": "64", "ep": "64"}, sections=["sec_recipe"])
    assert any("declares 1 MTP module" in c.value for c in at.caption)
    at.number_input(key="mtp_layers").set_value(1).run()
    query = dict(at.query_params)
    assert query["mtp_layers"] == "1"
    report = core_report(query)
    arch = MODEL_PRESETS["deepseek-v3"][0]
    from dataclasses import replace
    assert report["params"] == param_count(replace(arch, mtp_layers=1)) > param_count(arch)
    assert "1 multi-token prediction module" in report["recipe"]
    assert f"recipe: {report['recipe']}" in header_text(at)


def test_async_tp_shows_with_compiled_sequence_parallel_tp_and_reaches_the_link_and_the_core():
    at = run_app({"model": "llama-3-8b", "tp": "8", "sequence_parallel": "true"}, sections=["sec_recipe"])
    assert "async_tp" not in switches(at)                       # torchtitan: compiled blocks only
    switch(at, "compile").set_value(True).run()
    switch(at, "async_tp").set_value(True).run()
    query = dict(at.query_params)
    assert query["async_tp"] == "true"
    report = core_report(query)
    assert report["recipe"] == "no recompute, torch.compile'd blocks, async tensor parallel"
    assert f"recipe: {report['recipe']}" in header_text(at)
    workspace = 2 * (2048 // 8) * 4096 * 2                      # step/async_tp.py: tokens 2,048, fp16 activations
    stage = report["peak"][3]
    assert stage["phases"][stage["peak_phase"]]["CUDA context"] == report["cuda_context"]["bytes"] + workspace
    assert_overview_matches_core(at, report)
