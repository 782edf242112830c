"""Serving vkc bundles behind Ray Serve (`pip install 'vkc[serve]'`; docs/SERVING.md).

- `batching`: requests into a bundle's shape variants (check, pack, pad, split); no Ray.
- `codec`: HTTP bodies (JSON, npz, npy) to feeds and back; no Ray.
- `engine`: a bundle loaded once through runtime_min, a chunk filled into its input memory and run.
- `generation`: a decoder's generation requests checked, and the records a generation streams; no Ray.
- `streaming`: a blocking iterator run on the runner thread, read on the event loop; no Ray.
- `deployment`: the Serve deployment (HTTP and Python handles, @serve.batch, health, metrics).
- `app`: the application's replicas and resources, `vkc serve`.
Importing this package imports no Ray: `serving.app` and `serving.deployment` do.
"""
