"""Object detection as set prediction: DETR (Carion et al. 2020) on any COCO-format dataset.

One paper concept per module: `data` (COCO reader), `shapes` (built-in dataset), `transforms`,
`backbone`, `detr`, `output` (what every detector returns), `hungarian_matcher`, `set_criterion`,
`postprocess`, `evaluate` (COCO AP), `detector` (`Detector.from_run`); `architectures` lists the
models `--arch` can name (`config` their configs), `variants` the techniques of `fast`.
"""
