"""Detection configs: the model (`DetrConfig`, `FastDetrConfig`) and its training (`DetectionTrainConfig`); presets.

`detr-r50` is the paper's configuration (Carion et al. 2020, section 4 and appendix A.4);
`small` trains `fast` on the built-in `shapes` data on 2 CPU cores in minutes; `medium` is `small` at 320 px
with 30 queries, a half-width ResNet-18 and the encoder on the coarsest level; `tiny` is for tests.
Saved together as the run folder's config.json, the model's fields flat under "model" with its
"arch", and rebuilt from it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar, Literal

from attnkit import overrides
from attnkit.errors import ConfigError

BACKBONES = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet")  # "resnet": the backbone_* fields' layout


@dataclass(frozen=True)
class ResNetLayout:
    """A ResNet's shape (He et al. 2016, Table 1): block type, blocks per stage (conv2_x..conv5_x), each stage's
    output channels, the stem's (conv1) channels and the image's. A bottleneck's 3x3 convolution has a quarter
    of its block's output channels (torchvision's, timm's and transformers' ResNets alike)."""
    block: Literal["basic", "bottleneck"]
    depths: tuple[int, ...]
    widths: tuple[int, ...]
    stem_width: int = 64
    in_channels: int = 3


# torchvision's named ResNets (torchvision.models.resnet18, ...): widths 64 * 2^i, x4 for bottlenecks
RESNETS = {"resnet18": ResNetLayout("basic", (2, 2, 2, 2), (64, 128, 256, 512)),
           "resnet34": ResNetLayout("basic", (3, 4, 6, 3), (64, 128, 256, 512)),
           "resnet50": ResNetLayout("bottleneck", (3, 4, 6, 3), (256, 512, 1024, 2048)),
           "resnet101": ResNetLayout("bottleneck", (3, 4, 23, 3), (256, 512, 1024, 2048))}


@dataclass(frozen=True)
class DetrConfig:
    """The paper's detector; the defaults are DETR-R50 (hidden 256, 8 heads, 6+6 layers, d_ff 2048, 100 queries)."""
    arch: ClassVar[str] = "detr"  # a key of MODEL_CONFIGS and of attnkit.detection.architectures.ARCHITECTURES
    num_classes: int = 91  # real classes; the dataset's at training time ("no object" is added)
    backbone: str = "resnet50"  # a named ResNet (RESNETS), or "resnet": the backbone_* fields below
    backbone_block: str = ""  # with backbone "resnet": "basic" or "bottleneck"
    backbone_depths: tuple[int, ...] = ()  # with backbone "resnet": blocks in each of the 4 stages
    backbone_widths: tuple[int, ...] = ()  # with backbone "resnet": each stage's output channels
    backbone_stem_width: int = 64  # with backbone "resnet": conv1's output channels
    num_channels: int = 3  # image channels: 3 (RGB) or 1 (greyscale)
    dilation: bool = False  # DC5: dilate the last stage, stride 16 instead of 32
    frozen_batchnorm: bool = False  # True when the backbone starts from pretrained weights
    hidden_dim: int = 256
    num_heads: int = 8
    enc_layers: int = 6
    dec_layers: int = 6
    dim_feedforward: int = 2048
    dropout: float = 0.1
    num_queries: int = 100
    pre_norm: bool = False  # the paper is post-norm
    aux_loss: bool = True  # a loss after every decoder layer (section 3.2)

    def __post_init__(self) -> None:
        for name in ("backbone_depths", "backbone_widths"):
            object.__setattr__(self, name, tuple(getattr(self, name)))  # config.json holds lists
        if self.backbone not in BACKBONES:
            raise ConfigError(f"backbone must be one of {', '.join(BACKBONES)}, got {self.backbone!r}")
        self._check_backbone_layout()
        if self.num_channels not in (1, 3):
            raise ConfigError(f"num_channels must be 3 (RGB) or 1 (greyscale), got {self.num_channels}")
        if self.dilation and self.resnet_layout.block == "basic":
            raise ConfigError(f"dilation (DC5) needs a bottleneck ResNet (resnet50 or resnet101), got {self.backbone}"
                              + (" with basic blocks" if self.backbone == "resnet" else ""))
        for name in ("num_classes", "hidden_dim", "enc_layers", "dec_layers", "dim_feedforward", "num_queries",
                     "num_heads"):
            if getattr(self, name) < (0 if name == "enc_layers" else 1):
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.hidden_dim % self.num_heads or self.hidden_dim % 2:
            raise ConfigError(f"hidden_dim ({self.hidden_dim}) must be even and divisible by num_heads "
                              f"({self.num_heads})")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")

    def _check_backbone_layout(self) -> None:
        """The backbone_* fields describe the layout of backbone "resnet" and are left unset for a named one."""
        given = self.backbone_block or self.backbone_depths or self.backbone_widths or self.backbone_stem_width != 64
        if self.backbone != "resnet":
            if given:
                raise ConfigError(f"backbone_block, backbone_depths, backbone_widths and backbone_stem_width "
                                  f"describe backbone 'resnet'; {self.backbone} has its own")
            return
        if self.backbone_block not in ("basic", "bottleneck"):
            raise ConfigError(f"backbone_block must be basic or bottleneck, got {self.backbone_block!r}")
        if len(self.backbone_depths) != 4 or len(self.backbone_widths) != 4:
            raise ConfigError(f"backbone_depths and backbone_widths need one value per stage (4 stages), got "
                              f"{list(self.backbone_depths)} and {list(self.backbone_widths)}")
        if min(*self.backbone_depths, *self.backbone_widths, self.backbone_stem_width) < 1:
            raise ConfigError(f"backbone_depths, backbone_widths and backbone_stem_width must be positive, got "
                              f"{list(self.backbone_depths)}, {list(self.backbone_widths)}, {self.backbone_stem_width}")
        if self.backbone_block == "bottleneck" and min(self.backbone_widths) < 4:
            raise ConfigError(f"a bottleneck's 3x3 convolution has a quarter of its channels: backbone_widths must "
                              f"be at least 4, got {list(self.backbone_widths)}")

    @property
    def resnet_layout(self) -> ResNetLayout:
        """The backbone's layout: the named ResNet's, or the backbone_* fields' (backbone "resnet")."""
        if self.backbone == "resnet":
            return ResNetLayout(self.backbone_block, self.backbone_depths, self.backbone_widths,  # type: ignore[arg-type]
                                self.backbone_stem_width, self.num_channels)
        return replace(RESNETS[self.backbone], in_channels=self.num_channels)


@dataclass(frozen=True)
class FastDetrConfig(DetrConfig):
    """`fast` (attnkit.detection.variants.fast_detr): DETR's fields, and one per technique that switches it off
    (for ablations); with every technique off `fast` computes DETR."""
    arch: ClassVar[str] = "fast"
    feature_levels: int = 3  # ResNet stages read: 1 = the last alone (C5: DETR), 3 = C3, C4, C5; levels past the
    # backbone's last stage are made from it by stride-2 convolutions (Deformable DETR's fourth level)
    last_stage: int = 5  # the backbone's deepest stage: 5 = C5 (DETR); 4 = the ResNet stops after C4
    stride4_level: bool = False  # C2, the ResNet's stride-4 map, read as one more, finest level (read, not updated
    # by the encoder): detail for objects a few pixels wide (needs deformable_attention)
    deformable_attention: bool = True  # multi-scale deformable attention (Zhu et al. 2021) instead of full
    deformable_points: int = 4  # sampled points per head and level
    encoder_levels: int = 1  # the deformable encoder updates the coarsest N levels, reading all (Lite DETR): 1 = C5
    # alone (RT-DETR's attention on S5; `medium` trained as well as with C4 and C5, and ran faster, BENCHMARKS.md,
    # "The encoder on C5 alone"); 2 = C4 and C5 (`small`); feature_levels or more: every level (Deformable DETR)
    cross_scale_fusion: bool = False  # RT-DETR's CNN fusion of the encoder's levels (top-down, then bottom-up)
    box_refinement: bool = True  # anchor-box queries, refined by every decoder layer
    distribution_refinement: bool = False  # the refinement as four edge distributions per layer (D-FINE's FDR,
    # with its localization loss; needs box_refinement)
    localization_distillation: bool = False  # earlier layers' edge distributions trained towards the last layer's
    # (D-FINE's GO-LSD; needs distribution_refinement)
    focal_loss: bool = True  # sigmoid focal classification loss and matching cost (weights: train.focal_*)
    iou_aware: bool = True  # with focal_loss: the class target is the matched box's IoU (varifocal loss, RT-DETR's)
    matchability_aware: bool = False  # with iou_aware: DEIM's MAL in place of the varifocal loss (target IoU^1.5)
    query_groups: int = 3  # query groups trained one-to-one each (Group DETR); 1 = off
    two_stage: bool = True  # the decoder starts from the best encoder proposals (needs box_refinement)
    denoising_groups: int = 0  # groups of noised ground-truth queries to rebuild in training (measured: no gain here)
    denoising_label_noise: float = 0.25  # the probability that a denoising query's label flips (DN-DETR's lambda_1)
    denoising_box_noise: float = 1.0  # a denoising box's corners move by up to this times half its size (lambda_2)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.feature_levels <= 4 or self.deformable_points < 1 or self.query_groups < 1:
            raise ConfigError(f"feature_levels must be in 1..4, deformable_points and query_groups at least 1, got "
                              f"{self.feature_levels}, {self.deformable_points}, {self.query_groups}")
        if self.last_stage not in (4, 5):
            raise ConfigError(f"last_stage must be 5 (C5) or 4 (the ResNet stops after C4), got {self.last_stage}")
        if self.last_stage == 4 and self.dilation:
            raise ConfigError("dilation (DC5) dilates C5, which last_stage=4 does not build; set one of them")
        if self.encoder_levels < 1:
            raise ConfigError(f"encoder_levels must be at least 1, got {self.encoder_levels}")
        if self.encoder_levels < self.feature_levels and not self.deformable_attention:
            raise ConfigError("encoder_levels below feature_levels updates some levels of the deformable encoder "
                              "and needs deformable_attention; set encoder_levels to feature_levels to ablate "
                              "deformable attention")
        if self.cross_scale_fusion and self.feature_levels < 2:
            raise ConfigError("cross_scale_fusion fuses several feature levels and needs feature_levels of 2 or more")
        if self.stride4_level and not self.deformable_attention:
            raise ConfigError("stride4_level reads a stride-4 map, which only deformable attention can afford; "
                              "it needs deformable_attention")
        if self.two_stage and not self.box_refinement:
            raise ConfigError("two_stage starts the decoder from proposed boxes and needs box_refinement; "
                              "set both to false to ablate refinement")
        if self.matchability_aware and not (self.focal_loss and self.iou_aware):
            raise ConfigError("matchability_aware replaces the varifocal loss and needs focal_loss and iou_aware; "
                              "set model.iou_aware=true")
        if self.distribution_refinement and not self.box_refinement:
            raise ConfigError("distribution_refinement refines anchor boxes and needs box_refinement; "
                              "set both to false to ablate refinement")
        if self.localization_distillation and not self.distribution_refinement:
            raise ConfigError("localization_distillation distils the edge distributions of distribution_refinement; "
                              "set model.distribution_refinement=true")
        if self.denoising_groups < 0:
            raise ConfigError(f"denoising_groups must be 0 (off) or more, got {self.denoising_groups}")
        if self.denoising_groups and not self.box_refinement:
            raise ConfigError("denoising queries start from noised boxes and need box_refinement; "
                              "set model.denoising_groups=0 to ablate refinement")
        if not 0 <= self.denoising_label_noise <= 1 or self.denoising_box_noise < 0:
            raise ConfigError(f"denoising_label_noise must be in [0, 1] and denoising_box_noise non-negative, got "
                              f"{self.denoising_label_noise}, {self.denoising_box_noise}")


MODEL_CONFIGS: dict[str, type[DetrConfig]] = {"detr": DetrConfig, "fast": FastDetrConfig}  # arch -> model config
# what runs written before `fast` had its own config saved under "model" whatever the arch (DETR read none of it)
_TECHNIQUE_FIELDS = frozenset({f.name for f in fields(FastDetrConfig)} - {f.name for f in fields(DetrConfig)}
                              | {"lite_encoder", "shared_values"})


def with_arch(model: DetrConfig, arch: str, **changes: Any) -> DetrConfig:
    """MODEL as the config of ARCH, with CHANGES: the fields both configs have keep MODEL's values (DETR's
    sizes), the others take ARCH's defaults. ConfigError naming the architectures if ARCH is unknown."""
    if arch not in MODEL_CONFIGS:
        raise ConfigError(f"unknown detector architecture {arch!r}; choose one of {', '.join(MODEL_CONFIGS)}")
    config_class = MODEL_CONFIGS[arch]
    names = {f.name for f in fields(config_class)}
    return config_class(**{**{k: v for k, v in asdict(model).items() if k in names}, **changes})


def model_from_dict(values: dict[str, Any]) -> DetrConfig:
    """The model config saved as VALUES (config.json's "model": its arch and fields), older forms included.

    Older runs saved every technique field whatever the arch (DETR's are dropped), and lack those added
    since (`two_stage`, `denoising_groups` and `iou_aware` off; `encoder_levels`: every level, or all but C3
    where they had `lite_encoder`). `shared_values` (one value projection for several layers) was removed on
    7 December 2026: runs saved with it off load, runs trained with it get a ConfigError."""
    values = dict(values)
    arch = values.pop("arch", "detr")
    if arch not in MODEL_CONFIGS:
        raise ConfigError(f"unknown detector architecture {arch!r}; choose one of {', '.join(MODEL_CONFIGS)}")
    if MODEL_CONFIGS[arch] is DetrConfig:
        return DetrConfig(**{k: v for k, v in values.items() if k not in _TECHNIQUE_FIELDS})
    if values.pop("shared_values", False):
        raise ConfigError("this run was trained with model.shared_values, which attnkit no longer builds (its "
                          "speed now comes without sharing: the deformable attention samples the keys first); "
                          "train it again, or use an attnkit from before 7 December 2026")
    values = {"two_stage": False, "denoising_groups": 0, "iou_aware": False, **values}
    if "encoder_levels" not in values:
        levels = values.get("feature_levels", 3)
        values["encoder_levels"] = max(levels - 1, 1) if values.pop("lite_encoder", False) else levels
    return MODEL_CONFIGS[arch](**values)


@dataclass(frozen=True)
class DetectionTrainConfig:
    """Optimisation, augmentation and loss weights; the defaults are the paper's (the focal ones Deformable DETR's)."""
    lr: float = 1e-4
    lr_backbone: float = 1e-5
    weight_decay: float = 1e-4
    clip_max_norm: float = 0.1
    batch_size: int = 2
    lr_drop: float = 2 / 3  # learning rates x 0.1 once this fraction of the budget is spent (200 of 300 epochs); 1: no
    train_scales: tuple[int, ...] = (480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800)
    max_size: int = 1333
    val_size: int = 800
    flip: bool = True
    crop_min_fraction: float = 0.5
    cost_class: float = 1.0
    cost_bbox: float = 5.0
    cost_giou: float = 2.0
    ce_loss_coef: float = 1.0
    bbox_loss_coef: float = 5.0
    giou_loss_coef: float = 2.0
    eos_coef: float = 0.1  # weight of the "no object" class
    # with model.focal_loss, in place of cost_class and ce_loss_coef (Zhu et al. 2021: set_cost_class, cls_loss_coef)
    focal_cost_class: float = 2.0
    focal_loss_coef: float = 2.0  # with model.iou_aware off; the varifocal loss weighs 1 (RT-DETR's loss_vfl)
    focal_alpha: float = 0.25  # FL's alpha and gamma (Lin et al. 2017, Eq. 5), in the loss and the matching cost
    focal_gamma: float = 2.0
    seed: int = 0
    accumulate: int = 1  # batches per optimizer step: each step sees batch_size x accumulate x processes images
    amp: Literal["auto", "off", "bf16", "fp16"] = "auto"  # autocast; auto: bf16 on CUDA and CPUs with native bf16
    ema_decay: float | None = None  # a moving average of the weights, weights/ema (`attnkit.training.ema`)
    mosaic: float = 0.0  # the probability that a training image is a mosaic of four, until the lr drop (DEIM)

    def __post_init__(self) -> None:
        object.__setattr__(self, "train_scales", tuple(int(s) for s in self.train_scales))
        if self.lr <= 0 or self.lr_backbone < 0 or self.weight_decay < 0:
            raise ConfigError("lr must be positive, lr_backbone and weight_decay non-negative")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {self.batch_size}")
        if not 0 < self.lr_drop <= 1:
            raise ConfigError(f"lr_drop is the fraction of the budget after which the learning rates drop, "
                              f"in (0, 1], got {self.lr_drop}")
        if not isinstance(self.accumulate, int) or self.accumulate < 1:
            raise ConfigError(f"accumulate must be a whole number of batches, at least 1, got {self.accumulate!r}")
        if self.amp not in ("auto", "off", "bf16", "fp16"):
            raise ConfigError(f"amp must be auto, off, bf16 or fp16, got {self.amp!r}")
        if not self.train_scales or min(self.train_scales) < 16 or self.val_size < 16:
            raise ConfigError(f"image sizes must be at least 16 pixels, got {self.train_scales} / {self.val_size}")
        if self.max_size < max(max(self.train_scales), self.val_size):
            raise ConfigError(f"max_size ({self.max_size}) must be at least the largest scale")
        if not 0 < self.crop_min_fraction <= 1:
            raise ConfigError(f"crop_min_fraction must be in (0, 1], got {self.crop_min_fraction}")
        if not 0 <= self.mosaic <= 1:
            raise ConfigError(f"mosaic is the probability that a training image is a mosaic, in [0, 1], got "
                              f"{self.mosaic}")
        if self.ema_decay is not None and not 0.0 < self.ema_decay < 1.0:
            raise ConfigError(f"ema_decay must be between 0 and 1 (e.g. 0.999), or none, got {self.ema_decay}")
        if not 0 <= self.focal_alpha <= 1 or self.focal_gamma < 0:
            raise ConfigError(f"focal_alpha must be in [0, 1] and focal_gamma non-negative, got "
                              f"{self.focal_alpha}, {self.focal_gamma}")


def train_from_dict(values: dict[str, Any]) -> DetectionTrainConfig:
    """The training config saved as VALUES, older forms included: a drop after N epochs (`lr_drop_epochs`)
    resumes without one; the focal weights, before they were fields, were twice cost_class and ce_loss_coef."""
    values = dict(values)
    if "lr_drop_epochs" in values:
        values = {"lr_drop": 1.0, **values}
        del values["lr_drop_epochs"]
    if "focal_cost_class" not in values:
        values["focal_cost_class"] = 2 * values.get("cost_class", 1.0)
        values["focal_loss_coef"] = 2 * values.get("ce_loss_coef", 1.0)
    return DetectionTrainConfig(**values)


@dataclass(frozen=True)
class DetectionConfig:
    """A detection run's whole config: model, training, and where the data came from."""
    model: DetrConfig = field(default_factory=DetrConfig)  # or a subclass, as model.arch says
    train: DetectionTrainConfig = field(default_factory=DetectionTrainConfig)
    preset: str = "detr-r50"
    data: str = "shapes"  # "shapes" or a COCO-layout folder
    class_names: tuple[str, ...] = ()
    category_ids: tuple[int, ...] = ()  # label -> the dataset's category id
    shapes: dict[str, Any] = field(default_factory=dict)  # ShapesConfig fields when data is "shapes"

    def to_dict(self) -> dict[str, Any]:
        document = asdict(self)
        document["model"] = {"arch": self.model.arch, **document["model"]}
        return document

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> DetectionConfig:
        """Rebuild from config.json; ConfigError on unknown or missing sections.

        Fields added since a run was written take their defaults (`train.amp`, `train.accumulate`), or the
        values the run trained with (`model_from_dict`, `train_from_dict`), so older run folders still
        resume, evaluate and detect.
        """
        try:
            return cls(model=model_from_dict(document["model"]), train=train_from_dict(document["train"]),
                       **{f.name: _tuple(document[f.name]) for f in fields(cls) if f.name not in ("model", "train")})
        except (KeyError, TypeError) as error:
            raise ConfigError(f"not a detection config ({error})") from None


def _tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


# the ResNet stops after C4: on 96 px images C5 is 3 x 3 cells, yet layer4 holds 8.4M of ResNet-18's 11.2M weights
# and half of its inference time (BENCHMARKS.md, "The ResNet stops after C4")
_SMALL_MODEL = FastDetrConfig(backbone="resnet18", hidden_dim=128, num_heads=8, enc_layers=2, dec_layers=2,
                              dim_feedforward=512, dropout=0.0, num_queries=15, last_stage=4, encoder_levels=2)
# one scale, no crop, the drop at 80%: for budgets of minutes (BENCHMARKS.md, "Detector convergence"); a moving
# average of the weights, which scores well above them before the drop (BENCHMARKS.md, "A moving average")
_SMALL_TRAIN = DetectionTrainConfig(lr=3e-4, lr_backbone=3e-4, clip_max_norm=0.1, batch_size=4, lr_drop=0.8,
                                    train_scales=(96,), max_size=160, val_size=96, crop_min_fraction=1.0,
                                    ema_decay=0.9995)
# larger images: small's recipe at 320 px with 30 queries (more objects per image) and its ResNet-18 at half width
# (stem 32, stages 32-64-128: the shrunk RT-DETR's widths). At 320 px the convolutions are most of a step: the half
# width made 1.5-1.8x the steps and trained as well in 10 minutes as the full width, which trained better than a wider
# model (hidden 256, the ResNet to C5, 3 decoder layers); BENCHMARKS.md, "Which model at 320 px". Its encoder updates
# the coarsest level alone (RT-DETR's attention on C5; C4 is read): at 320 px C4 has 400 tokens to C5's 100, and
# updating C5 alone trained as well and runs faster (BENCHMARKS.md, "The encoder on C5 alone")
_MEDIUM_MODEL = replace(_SMALL_MODEL, num_queries=30, backbone="resnet", backbone_block="basic",
                        backbone_depths=(2, 2, 2, 2), backbone_widths=(32, 64, 128, 256), backbone_stem_width=32,
                        encoder_levels=1)
_MEDIUM_TRAIN = replace(_SMALL_TRAIN, train_scales=(320,), max_size=533, val_size=320)
PRESETS: dict[str, tuple[DetrConfig, DetectionTrainConfig]] = {
    "detr-r50": (DetrConfig(), DetectionTrainConfig()),
    "small": (_SMALL_MODEL, _SMALL_TRAIN),
    "medium": (_MEDIUM_MODEL, _MEDIUM_TRAIN),
    "tiny": (DetrConfig(backbone="resnet18", hidden_dim=32, num_heads=2, enc_layers=1, dec_layers=1, dim_feedforward=64,
                        dropout=0.0, num_queries=10),
             replace(_SMALL_TRAIN, lr=5e-4, lr_backbone=5e-4, batch_size=4, train_scales=(64,), max_size=96,
                     val_size=64, crop_min_fraction=1.0, amp="off", ema_decay=None)),  # fp32: tests compare exact sums
}


def preset(name: str) -> tuple[DetrConfig, DetectionTrainConfig]:
    """The model and training configs of a preset; ConfigError naming the presets if unknown."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


def override(config: DetectionConfig, assignments: list[str]) -> DetectionConfig:
    """CONFIG with `model.KEY=VALUE` / `train.KEY=VALUE` strings applied (`attnkit.overrides`).

    `model.arch=NAME` applies first, wherever it is given (`with_arch`: the other architecture's fields
    take their defaults), so that the other assignments may name that architecture's fields."""
    archs = [a.partition("=")[2] for a in assignments if a.partition("=")[0] == "model.arch"]
    if archs:
        config = replace(config, model=with_arch(config.model, overrides.parse_value(archs[-1])))
    rest = [a for a in assignments if a.partition("=")[0] != "model.arch"]
    return overrides.override(config, rest, DetectionConfig.from_dict, sections=("model", "train"))


def check_kept(config: DetectionConfig, assignments: list[str]) -> None:
    """ConfigError if ASSIGNMENTS (`--set`, `--amp`, ...) change a resumed run's saved CONFIG."""
    overrides.check_kept(config, assignments, override)
