"""A model's config.json (and its safetensors index) from the Hugging Face Hub, for the CLI and the app.

    ids.validate_repo_id("meta-llama/Llama-3.1-8B") -> the id, or HubError naming "hub" and what is allowed
    ids.validate_revision("main")                -> a branch, tag, refs/pr/N or 40-hex commit; HubError "revision"
    ids.validate_token(text)                     -> None (use HF_TOKEN / a saved login) or the token; HubError "token"
    fetch.fetch_config("meta-llama/Llama-3.1-8B", revision=None, token=None, timeout_s=10, max_bytes=1_000_000)
        -> HubConfig(repo_id, revision, config, safetensors_total_size, published_dtype_note, notes, commit, ...)

One of the two readers in zerocalc/ with an optional dependency: huggingface_hub (and its HTTP client, httpx2) is
imported inside functions only (transfer.import_hub), so `import zerocalc.model.hub.fetch` and the validators work
without it, and a missing install is a HubError saying `pip install huggingface_hub`.

Safety rules:
- the id, revision and token are validated before huggingface_hub is even imported, so a bad one never reaches the
  network;
- only config.json and model.safetensors.index.json are downloaded, through huggingface_hub's cache (cache_dir, its
  default otherwise); model.safetensors is at most asked for its size (a HEAD: no weights are downloaded);
- config.json is parsed by hf_config.parse_config (json.loads and its size cap): it is data, never code, and no
  remote code is ever trusted or run;
- a config.json announced (Content-Length) as larger than max_bytes is refused before it is requested; one that
  streams past max_bytes is stopped at huggingface_hub's 10 MiB read chunk and its partial file deleted;
- the HEAD runs with timeout_s and no retries; the download (which huggingface_hub retries on its own) must finish
  within timeout_s more, else it is abandoned (its worker thread ends within the library's own retry budget and
  writes only to a temporary file);
- no telemetry: HF_HUB_DISABLE_TELEMETRY defaults to 1 when this module imports huggingface_hub (_import_hub);
- HF_HUB_OFFLINE (read at call time, and as huggingface_hub read it at import) serves the cache only;
- a token goes to the endpoint only: no message, repr or log line of this module contains it, and the errors raised
  carry no exception chain (huggingface_hub's exceptions hold the request and its Authorization header).
"""
