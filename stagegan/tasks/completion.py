"""Image completion (Iizuka et al. 2017, "Globally and Locally Consistent Image Completion").

The completion network sees the image with a hole (hole pixels zeroed) plus the mask, and
outputs a full image; the completed image keeps the known pixels and takes the generated ones
only in the hole. The discriminator scores the whole image (global branch) and a crop around
the hole (local branch) together.

Loss terms:
    reconstruction      masked L2 in the hole, or L1 with `loss.reconstruction: l1`
    reconstruction_l1   masked L1 in the hole
        Both are reduced by `loss.reduction`: "sum" (the default, as in the paper: per image,
        the sum over hole pixels and channels, then the batch mean, so that the paper's
        alpha = 0.0004 keeps its meaning) or "mean" (the mean over hole elements).
        `loss.spatial_discount: gamma` (DeepFill v1, Yu et al. 2018: 0.9) weighs a hole
        pixel gamma ** (d - 1) at distance d from the nearest known pixel (`discounted`).
    reconstruction_known
                        L1 on the known pixels only, reduced the same way (LaMa, Suvorov et
                        al. 2022, trains with it at weight 10 and no pixel loss in the hole)
    perceptual          the sum over the layers of a feature network the user names
                        (`loss.perceptual_network: package.module:function`, called with the
                        task, returning a keras.Model; frozen) of the mean squared difference
                        between the features of the raw output and of the real image (LaMa's
                        perceptual loss, on any network that is available offline)
    d_adversarial       real images against completed ones (`loss.adversarial`)
    g_adversarial       the completion network's adversarial loss on completed images
        `loss.adversarial_target`: `image` (the default: every output of the discriminator
        on a completed image is fake) or `hole` (LaMa's `mask_as_fake_target`, for the patch
        discriminator: each output is fake in proportion to the hole in its cell of the
        image and real elsewhere, since the known pixels are real ones; the generator's
        term pushes only those outputs, normalised by the batch's hole share;
        `losses.targeted`). With `augment:`, the mask moves with the images.
    feature_matching    the completion network's feature-matching loss (pix2pixHD, Wang et
                        al. 2018; Salimans et al. 2016): for each hidden layer of the
                        discriminator (the outputs of its LeakyReLU layers), the mean absolute
                        difference between its activations on each real image and on the
                        same image completed, summed over the layers
    r1                  R1 on real images, through both branches (weight it gamma / 2;
                        usable lazily with `every`)
    lecam, bcr,         LeCam and balanced consistency on the discriminator (see
    bcr_real, bcr_fake  `stagegan.core.regularisers`), real images against completed ones

Holes (`data.holes`): `rectangle` (the default), one random rectangle per image, each side
between `data.hole_min` and `data.hole_max` (fractions of the image side), with
`data.strokes: N` random thick strokes added (free-form); `box` and `wide`, LaMa's box and
wide-mask generators (`stagegan.data.masks`). `data.masks: DIR`: the user's mask images
instead (white: the hole), fitted as the images are, one drawn at random per image; `sample
--input DIR --masks DIR` pairs them with the user's images by file name. The local crop (the
GLCIC discriminator's, and `eval`'s c2st) is centred on each hole's centre of mass.

`model.discriminator_type`: `glcic` (the default: global and local branches, one logit) or
`patch` (a PatchGAN that sees the image and the mask and scores each overlapping patch).

`model.gated: true` makes every convolution of the built-in generator but its last a gated
convolution (DeepFill v2, Yu et al. 2019: features x sigmoid(gate), a second convolution of
the same shape for the gate; ReLU features where DeepFill uses ELU).

`model.feather: F` (pixels, default 0) blends the fill into its surroundings, as GLCIC's
post-processing blends its completions: the completed image takes the network's output with
weight 1 in the hole, falling linearly to 0 over the F pixels around it (the known pixels
there are mixed with the output), instead of a hard cut at the hole's edge, and the
reconstruction terms weigh the error with the same weights, so the network learns to
reproduce that band. 0: the hard composite.
Masks are drawn from the run's noise stream for the whole global batch.
"""

import os

import keras
import numpy as np
import tensorflow as tf

from stagegan.config.fields import boolean, choice, not_negative, object_path, optional, positive
from stagegan.core import losses, regularisers
from stagegan.core.layers import conv2d, dense
from stagegan.data import masks
from stagegan.data.sources import DEFAULTS as DATA_DEFAULTS
from stagegan.errors import ConfigError
from stagegan.runfolder import pictures
from stagegan.tasks.base import (
    NOISE_STREAM,
    Description,
    ImageTask,
    Sizes,
    build_network,
    builds_own,
    float32,
    make_generator,
)

RECONSTRUCTION = {"l1": losses.masked_l1, "l2": losses.masked_l2}


def mask_folder(value, key):
    """`data.masks`: a folder of mask images."""
    if not isinstance(value, str) or not value:
        raise ConfigError(key, f"expected a folder of mask images. Received: {value!r}")
    return value


def dilation_rates(value, key):
    """`model.dilations`: positive integers."""
    if not all(isinstance(r, int) and r >= 1 for r in value):
        raise ConfigError(key, "must be a list of positive integers")
    return value


def feather_width(value, key):
    """`model.feather`: a whole number of pixels, 0 or more."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(key, f"must be a whole number of pixels, 0 or more. Received: {value!r}")
    return value


def spatial_discount(value, key):
    """`loss.spatial_discount`: DeepFill's gamma, in (0, 1] (compared, as task options are)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(
            key, f"must be a number in (0, 1] (DeepFill: 0.9), or null. Received: {value!r}"
        )
    return value


def adversarial_loss(value, key):
    """`loss.adversarial`: a known loss (`losses.adversarial`) that is not relativistic."""
    losses.adversarial(value, key)
    if losses.relativistic(value):
        raise ConfigError(
            key,
            f"{value} is not available for task completion (it pairs real and generated "
            "outputs; a completion's are partly real)",
        )
    return value


# Each option's own check (`check(value, key)`, as a config field's: `stagegan.config.fields`),
# in the order they run (`Task.check_options`); `__init__` checks across options.
OPTION_CHECKS = (
    ("data.strokes", not_negative),
    ("data.holes", choice(("rectangle", *masks.GENERATORS))),
    ("data.masks", optional(mask_folder)),
    ("model.width", positive),
    ("model.dilations", dilation_rates),
    ("model.discriminator_type", choice(("glcic", "patch"))),
    ("model.feather", feather_width),
    ("model.gated", boolean),
    ("loss.spatial_discount", optional(spatial_discount)),
    ("loss.perceptual_network", optional(object_path)),
    ("loss.reconstruction", choice(tuple(RECONSTRUCTION))),
    ("loss.reduction", choice(losses.REDUCTIONS)),
    ("loss.adversarial", adversarial_loss),
    ("loss.adversarial_target", choice(("image", "hole"))),
)


class Completion(ImageTask):
    name = "completion"
    capabilities = ImageTask.capabilities | {"inputs", "augments"}
    loss_terms = (
        "reconstruction",
        "reconstruction_l1",
        "reconstruction_known",
        "perceptual",
        "d_adversarial",
        "g_adversarial",
        "feature_matching",
        "r1",
        *regularisers.TERMS,
    )
    # What benchmarks/ablation.py removes: every generator term that comes from the discriminator.
    generator_adversarial_terms = ("g_adversarial", "feature_matching")
    monitor_terms = {  # logged with them
        "d_adversarial": losses.ACCURACY_TERMS,
        "lecam": regularisers.LECAM_MONITORS,
    }
    metrics = ("completion",)  # stagegan.evaluation.builtin
    defaults = {
        "data": {
            **DATA_DEFAULTS,
            "hole_min": 0.25,
            "hole_max": 0.5,
            "strokes": 0,
            "holes": "rectangle",
            "masks": None,
        },
        "model": {
            "width": 32,
            "dilations": [2, 4],
            "spectral_norm": False,
            "discriminator_type": "glcic",
            "feather": 0,
            "gated": False,
            "generator": None,
            "discriminator": None,
        },
        "loss": {
            "adversarial": "non_saturating",
            "adversarial_target": "image",
            "reconstruction": "l2",
            "reduction": "sum",
            "spatial_discount": None,
            "perceptual_network": None,
            **regularisers.LECAM_DEFAULTS,
            **regularisers.BCR_DEFAULTS,
        },
    }

    def __init__(self, options, rngs):
        super().__init__(options, rngs)
        d = self.data
        if not 0 < d["hole_min"] <= d["hole_max"] <= 1:
            raise ConfigError(
                "data.hole_min",
                "need 0 < hole_min <= hole_max <= 1. "
                f"Received: hole_min={d['hole_min']}, hole_max={d['hole_max']}",
            )
        self.check_options(OPTION_CHECKS)
        self.d_loss, self.g_loss = losses.adversarial(self.loss["adversarial"])
        self.d_hole_loss, self.g_hole_loss = losses.targeted(self.loss["adversarial"])
        if self.loss["adversarial_target"] == "hole" and self.model["discriminator"] is None:
            if self.model["discriminator_type"] != "patch":
                raise ConfigError(
                    "loss.adversarial_target",
                    "hole needs a discriminator with an output per patch "
                    "(model.discriminator_type: patch); the glcic one gives one logit an "
                    "image",
                )
        self.d_accuracy = losses.AccuracyMonitor(self.loss["adversarial"])
        self.size = d["size"]
        if self.size % 4:
            raise ConfigError(
                "data.size", f"must be a multiple of 4 for completion. Received: {self.size}"
            )
        if self.model["feather"] > self.size // 4:
            raise ConfigError(
                "model.feather",
                f"blends a band as wide as a quarter of the image at most ({self.size // 4} "
                f"pixels at data.size {self.size}). Received: {self.model['feather']}",
            )
        self.crop = max(4, self.size // 2)
        # A rate past the image samples only the zero padding (and pads by as much).
        wide = [r for r in self.model["dilations"] if not isinstance(r, bool) and r > self.size]
        if wide:
            raise ConfigError(
                "model.dilations",
                f"a rate above data.size ({self.size}) sees only padding. Received: {wide[0]}",
            )

    def describe(self, stages):
        return Description(self.describe_networks(), [f"holes: {self.describe_holes()}"], {})

    def describe_holes(self):
        d = self.data
        if d["masks"] is not None:
            count = "" if self.mask_bank is None else f"{len(self.mask_bank):,} "
            holes = f"{count}mask images from {d['masks']}, drawn at random"
        elif d["holes"] == "rectangle":
            holes = f"a rectangle an image, sides {d['hole_min']:g}-{d['hole_max']:g} of the image"
            holes += f", and {d['strokes']} strokes" if d["strokes"] else ""
        else:
            holes = {"box": "LaMa's boxes", "wide": "LaMa's wide masks (strokes or boxes)"}
            holes = holes[d["holes"]]
        return holes

    def describe_networks(self):
        lines = {}
        if builds_own(self, "generator"):
            rates = ", ".join(str(r) for r in self.model["dilations"])
            lines["generator"] = f"GLCIC encoder-decoder, dilation rates {rates}" + (
                ", gated convolutions" if self.model["gated"] else ""
            )
        if builds_own(self, "discriminator"):
            kind = self.model["discriminator_type"]
            lines["discriminator"] = (
                "PatchGAN on the image and its mask" if kind == "patch" else "GLCIC global + local"
            )
        target = self.loss["adversarial_target"]
        if target == "hole":
            line = lines.get("discriminator", "your discriminator")
            lines["discriminator"] = f"{line}, fake target: the hole (LaMa)"
        return lines

    def sizes(self):
        size, width, crop = self.size, self.model["width"], self.crop
        dilated = len(self.model["dilations"])
        parameters, activations = [], []
        image = ("model.width", "data.size")
        if builds_own(self, "generator"):
            # 3x3 convolutions: in and out widths in units of `width` (see `generator`).
            units = 2 + 8 + 16 * (dilated + 1) + 8 + 8 + 2 + 2
            units *= 2 if self.model["gated"] else 1  # a gate beside each convolution
            parameters += [(("model.width", "model.dilations"), 9 * width * width * units)]
            quarter = (size // 4) ** 2 * 4 * width
            floats = size * size * width * 3 + quarter * (dilated + 3)
            activations += [(image, floats + (size // 2) ** 2 * 2 * width * 4)]
        if builds_own(self, "discriminator"):
            # 5x5 convolutions of the global and local branches (4x4 of the patch one).
            units = 2 * (1 + 2 + 8) + 8
            flat = ((size // 8) ** 2 * 4 + (crop // 4) ** 2 * 2) * 64
            parameters += [(("model.width",), 25 * width * width * units)]
            parameters += [(image, width * flat)]
            activations += [(image, (size * size + crop * crop) * width)]
        # a sample: the image with its hole, the mask, the completion and the image whole
        image_floats, keys = super().sizes()[2:]
        return Sizes(parameters, activations, 4 * image_floats, keys)

    def prepare(self, updates, device=None):
        super().prepare(updates, device)
        terms = {term for update in updates for term, _ in update.loss}
        if "perceptual" in terms and self.loss["perceptual_network"] is None:
            raise ConfigError(
                "loss.perceptual_network",
                "the perceptual term needs a feature network: name a function of the task "
                "that returns a keras.Model from images [S, S, C] in [-1, 1] to features "
                "('package.module:function')",
            )

    # Networks --------------------------------------------------------------------------------

    perceptual_network = None  # the frozen feature network of `loss.perceptual_network`

    mask_bank = None  # with `data.masks`: the user's masks [N, S, S, 1], fitted

    def build(self):
        if self.data["masks"] is not None:
            folder = os.path.expanduser(self.data["masks"])
            self.mask_bank, _ = masks.load_masks(folder, self.size)
        self.build_source()
        size, channels, crop = self.size, self.data["channels"], self.crop
        self.generator = build_network(
            self, "generator", generator, (size, size, channels + 1), (size, size, channels)
        )
        if self.model["discriminator_type"] == "patch":
            side = patch_side(size)
            self.discriminator = build_network(
                self,
                "discriminator",
                patch_discriminator,
                (size, size, channels + 1),
                (side, side, 1),
            )
        else:
            self.discriminator = build_network(
                self,
                "discriminator",
                discriminator,
                [(size, size, channels), (crop, crop, channels)],
                (1,),
            )
        self.discriminator_features = feature_extractor(self.discriminator)
        if self.loss["perceptual_network"] is not None:
            self.perceptual_network = self.build_feature_network()
        self.networks = {"generator": self.generator, "discriminator": self.discriminator}
        return self.networks

    def build_feature_network(self):
        """The user's feature network of `loss.perceptual_network`, frozen (not trained, not
        checkpointed: the function must return the same weights every time, e.g. from a
        file), checked on a batch of zeros."""
        from stagegan.config.objects import call_user, load_object

        key, path = "loss.perceptual_network", self.loss["perceptual_network"]
        network = call_user(key, path, load_object(path, key), self)
        if not isinstance(network, keras.Model):
            raise ConfigError(key, f"{path} returned {type(network).__name__}, not a keras.Model")
        network.trainable = False
        shape = (1, self.size, self.size, self.data["channels"])
        try:
            features = call_user(key, path, network, tf.zeros(shape), training=False)
        except ConfigError as e:
            message = f"{path} cannot take images {list(shape[1:])}: {e.message}"
            raise ConfigError(key, message) from None
        if not all(tf.is_tensor(f) for f in tf.nest.flatten(features)):
            raise ConfigError(key, f"{path} must return a tensor or a list of tensors")
        return network

    # Batches ---------------------------------------------------------------------------------

    def random_inputs(self, batch_size):
        return self.draw_holes(self.rngs.noise, batch_size)

    def draw_holes(self, rng, batch_size):
        """Holes for `batch_size` images from `rng`: `data.masks`' files drawn at random,
        else `data.holes`' generator (`rectangle`: `draw_holes`)."""
        if self.mask_bank is not None:
            return self.holes_of(masks.drawn_from(rng, self.mask_bank, batch_size))
        if self.data["holes"] == "rectangle":
            holes = draw_holes(rng, batch_size, self.size, self.data, self.crop)
            return self.with_share(holes)
        return self.holes_of(masks.GENERATORS[self.data["holes"]](rng, batch_size, self.size))

    def holes_of(self, mask):
        """The batch entries of masks `mask` [B, S, S, 1]: the mask, the local crop around
        each hole's centre of mass, the batch's hole share."""
        mask = tf.convert_to_tensor(mask, tf.float32)
        crop_offset = masks.crop_offsets(mask, self.crop)
        return self.with_share({"mask": mask, "crop_offset": crop_offset})

    def with_share(self, holes):
        """`holes` with, for `loss.adversarial_target: hole`, `hole_share` [B]: the share of
        the batch's pixels that the generator makes (the holes, or the blend weights of
        `model.feather`), one copy an image, so that every replica's shard carries the
        global batch's (see `losses.targeted`). Other runs need no share: `holes` as given."""
        if self.loss["adversarial_target"] != "hole":
            return holes
        feather, mask = self.model["feather"], holes["mask"]
        weights = feathered(mask, feather) if feather else mask
        share = tf.fill(tf.shape(mask)[:1], tf.reduce_mean(weights))
        return {**holes, "hole_share": share}

    # Losses ----------------------------------------------------------------------------------

    def complete(self, x, mask, training, weights=None):
        """(raw generator output, completed image) for images `x` with holes `mask`
        (`weights`: `reconstruction_weights(mask)`, when the caller has them already)."""
        known = x * (1.0 - mask)
        raw = float32(self.generator(tf.concat([known, mask], axis=-1), training=training))
        if not self.model["feather"]:
            return raw, known + raw * mask
        weight = self.reconstruction_weights(mask) if weights is None else weights
        return raw, x * (1.0 - weight) + raw * weight

    def reconstruction_weights(self, mask):
        """Where (and how much) the reconstruction terms count: the hole, or with
        `model.feather` the blend weights; with `loss.spatial_discount` the hole's pixels
        weigh less the further they are from a known pixel."""
        feather = self.model["feather"]
        weights = feathered(mask, feather) if feather else mask
        discount = self.loss["spatial_discount"]
        if discount is not None and discount < 1:
            weights = weights * tf.where(mask > 0, discounted(mask, discount), 1.0)
        return weights

    def crops(self, images, offsets):
        return crop_around(images, offsets, self.crop)

    def discriminator_inputs(self, images, batch, side):
        """What the discriminator sees of `images` of one shard `batch`: the images go
        through the stage's augmentation first (`augment:`, with the batch's random numbers
        of `side`); the GLCIC discriminator also sees their crops at the batch's
        `crop_offset`, the patch discriminator the batch's holes."""
        images = self.context.augment(images, batch, side)
        if self.model["discriminator_type"] == "patch":
            return tf.concat([images, self.seen_mask(batch, side)], -1)
        return [images, self.crops(images, batch["crop_offset"])]

    def seen_mask(self, batch, side, mask=None):
        """The batch's holes (or `mask`, a map of the same shape) where the discriminator
        sees them: moved with the images by the spatial ops of the stage's augmentation (the
        same numbers of `side`), in [0, 1]."""
        mask = batch["mask"] if mask is None else mask
        if self.context.augmenter is None:
            return mask
        uniforms = batch[f"augment_{side}"]
        moved = self.context.augmenter(mask, uniforms, spatial_only=True)
        return tf.clip_by_value(moved, 0.0, 1.0)

    def hole_target(self, batch, logits):
        """How fake each of the patch discriminator's outputs `logits` [B, h, w, 1] on a
        completed image is (`loss.adversarial_target: hole`): the share of generated pixels
        in its cell of the image (the hole, or with `model.feather` the blend weights, where
        the discriminator sees them, area-averaged to the output grid; LaMa resizes the mask
        nearest-neighbour)."""
        if logits.shape.rank != 4:
            raise ConfigError(
                "loss.adversarial_target",
                "hole needs a discriminator with a map of outputs [B, h, w, 1]; "
                f"model.discriminator gives shape {logits.shape}",
            )
        feather = self.model["feather"]
        blend = feathered(batch["mask"], feather) if feather else batch["mask"]
        generated = self.seen_mask(batch, "fake", blend)
        return tf.image.resize(generated, logits.shape[1:3], method="area")

    def score(self, images, batch, side="real"):
        """The discriminator's float32 logits for `images` (see `discriminator_inputs`)."""
        return float32(
            self.discriminator(self.discriminator_inputs(images, batch, side), training=True)
        )

    def features(self, images, batch):
        """The discriminator's hidden activations (float32, one tensor a layer) for `images`.
        Real and completed images both take the batch's "fake" augmentation, so that each
        pair is compared under the same transform."""
        if self.discriminator_features is None:
            raise ConfigError(
                "loss.feature_matching",
                "needs a functional discriminator with LeakyReLU layers (their outputs are "
                "the features); model.discriminator has none",
            )
        inputs = self.discriminator_inputs(images, batch, "fake")
        return [float32(f) for f in self.discriminator_features(inputs, training=True)]

    def losses(self, batch, terms):
        x, mask = batch["x"], batch["mask"]
        out = {}
        if "r1" in terms:
            out["r1"] = losses.r1_penalty(lambda images: self.score(images, batch), x)
        if not set(terms) - {"r1"}:
            return out  # a lazy R1 update needs no completion
        weights = self.reconstruction_weights(mask)
        raw, completed = self.complete(x, mask, training=True, weights=weights)
        if "reconstruction" in terms:
            reconstruction = RECONSTRUCTION[self.loss["reconstruction"]]
            out["reconstruction"] = reconstruction(x, raw, weights, self.loss["reduction"])
        if "reconstruction_l1" in terms:
            out["reconstruction_l1"] = losses.masked_l1(x, raw, weights, self.loss["reduction"])
        if "reconstruction_known" in terms:  # LaMa's L1 on the known pixels only
            known = 1.0 - mask
            out["reconstruction_known"] = losses.masked_l1(x, raw, known, self.loss["reduction"])
        if "perceptual" in terms:
            out["perceptual"] = perceptual_loss(self.perceptual_network, x, raw)
        outputs = None
        if {"d_adversarial", *regularisers.TERMS, *regularisers.LECAM_MONITORS} & set(terms):
            held = tf.stop_gradient(completed)
            real_logits = self.score(x, batch)
            fake_logits = self.score(held, batch, "fake")
            scorers = (lambda s: self.score(s, batch), lambda s: self.score(s, batch, "fake"))
            outputs, images = (real_logits, fake_logits), (x, held)
            out.update(
                regularisers.discriminator_terms(self, terms, batch, outputs, scorers, images)
            )
        out.update(self.adversarial_terms(batch, terms, completed, outputs))
        if "feature_matching" in terms:
            real = [tf.stop_gradient(f) for f in self.features(x, batch)]
            out["feature_matching"] = feature_matching(real, self.features(completed, batch))
        return out

    def adversarial_terms(self, batch, terms, completed, outputs):
        """`d_adversarial` and its accuracies, and `g_adversarial`, with the target of
        `loss.adversarial_target`; `outputs`: the discriminator's (real, fake) outputs on the
        batch (the completions held constant), when a discriminator term needs them."""
        out = {}
        by_hole = self.loss["adversarial_target"] == "hole"
        share = batch["hole_share"][0] if by_hole else None  # the global batch's
        if "d_adversarial" in terms:
            real_logits, fake_logits = outputs
            if by_hole:
                target = self.hole_target(batch, fake_logits)
                out["d_adversarial"] = self.d_hole_loss(real_logits, fake_logits, target)
            else:
                target = None
                out["d_adversarial"] = self.d_loss(real_logits, fake_logits)
            out.update(self.d_accuracy(real_logits, fake_logits, terms, target, share))
        if "g_adversarial" in terms:
            logits = self.score(completed, batch, "fake")
            if by_hole:
                target = self.hole_target(batch, logits)
                out["g_adversarial"] = self.g_hole_loss(logits, target, share)
            else:
                out["g_adversarial"] = self.g_loss(logits)
        return out

    def sample(self, inputs):
        return self.complete(inputs["x"], inputs["mask"], training=False)[1]

    # Samples -------------------------------------------------------------------------------

    sample_count = 8  # rows
    reconstruction_terms = frozenset({"reconstruction", "reconstruction_l1"})

    def sample_inputs(self, count, seed, key="--num"):
        """Real images (held out where the source has a split) with holes, fixed by `seed`."""
        images, held_out = self.real.draw(count, seed, key)
        return self.inputs_for_images(images, seed), {"held_out": held_out}

    def inputs_for_images(self, images, seed, user_masks=None):
        """Holes for given images in [-1, 1]: `user_masks` [N, S, S, 1] (one per image), else
        drawn from `seed`'s noise stream."""
        if user_masks is not None:
            holes = self.holes_of(user_masks)
        else:
            holes = self.draw_holes(make_generator(seed, NOISE_STREAM), len(images))
        return {"x": np.asarray(images, np.float32), **{k: v.numpy() for k, v in holes.items()}}

    def sample_outputs(self, inputs):
        raw, completed = self.complete(
            tf.constant(inputs["x"]), tf.constant(inputs["mask"]), training=False
        )
        return {"samples": completed.numpy(), "raw": raw.numpy()}

    def picture(self, inputs, outputs, info):
        """Rows of original | masked input | raw generator output | completed; the original
        only where the images are held out (or the user's own)."""
        x, mask = inputs["x"], inputs["mask"]
        masked = x * (1.0 - mask) + mask  # the hole in white
        columns = [masked, outputs["raw"], outputs["samples"]]
        if info.get("held_out"):
            columns.insert(0, x)
        return pictures.image_rows(columns)


# The built-in networks: `model.generator` / `model.discriminator` may name replacements with
# the same signature (`builder(task) -> keras.Model`).


def generator(task):
    """Encoder, dilated convolutions, decoder: [S, S, C + 1] (image with hole, mask) ->
    [S, S, C] in [-1, 1].

    Two stride-2 convolutions bring the image down to S/4 (GLCIC's factor), where the dilated
    convolutions (`model.dilations`) see the whole image: at 32x32, an 8x8 grid at 4 x width
    channels. The decoder upsamples by nearest-neighbour resizing then a convolution (no
    checkerboard artifacts, unlike a strided transposed convolution), and at each resolution
    sees the encoder's features through a skip connection, so known pixels next to the hole
    stay crisp.
    """
    size, channels, width = task.size, task.data["channels"], task.model["width"]
    layers = keras.layers
    conv = lambda filters, name, **kw: layers.Conv2D(
        filters, 3, padding="same", activation="relu", name=name, **kw
    )
    if task.model["gated"]:
        plain = conv

        def conv(filters, name, **kw):  # DeepFill v2's gated convolution
            gate = layers.Conv2D(
                filters, 3, padding="same", activation="sigmoid", name=f"{name}_gate", **kw
            )
            return lambda h: layers.Multiply()([plain(filters, name, **kw)(h), gate(h)])

    up = lambda h: layers.UpSampling2D(2, interpolation="nearest")(h)
    x = keras.Input((size, size, channels + 1))
    full = conv(width, "enc1")(x)  # S
    half = conv(2 * width, "enc2", strides=2)(full)  # S/2
    h = conv(4 * width, "enc3", strides=2)(half)  # S/4
    for rate in task.model["dilations"]:
        h = conv(4 * width, f"dilated{rate}", dilation_rate=rate)(h)
    h = conv(4 * width, "mid")(h)
    h = conv(2 * width, "dec1")(up(h))  # S/2
    h = conv(2 * width, "dec1_skip")(layers.Concatenate()([h, half]))
    h = conv(width, "dec2")(up(h))  # S
    h = conv(width, "dec2_skip")(layers.Concatenate()([h, full]))
    y = layers.Conv2D(channels, 3, padding="same", activation="tanh", name="out")(h)
    return keras.Model(x, y, name="generator")


def discriminator(task):
    """Global and local branches: [whole image [S, S, C], crop [c, c, C]] -> one logit."""
    size, channels, width, crop = task.size, task.data["channels"], task.model["width"], task.crop
    layers, norm = keras.layers, task.model["spectral_norm"]
    image = keras.Input((size, size, channels))
    patch = keras.Input((crop, crop, channels))

    def branch(h, name, mults):
        for i, mult in enumerate(mults):
            h = conv2d(width * mult, 5, 2, f"{name}{i}", norm)(h)
            h = layers.LeakyReLU(0.2)(h)
        return dense(64, f"{name}_fc", norm)(layers.Flatten()(h))

    both = layers.Concatenate()(
        [branch(image, "global", (1, 2, 4)), branch(patch, "local", (1, 2))]
    )
    logit = dense(1, "out", norm)(layers.LeakyReLU(0.2)(both))
    return keras.Model([image, patch], logit, name="discriminator")


def patch_side(size):
    """The side of the patch discriminator's logit map for images of side `size`."""
    return size // 4


def patch_discriminator(task):
    """A PatchGAN (Isola et al. 2017) that also sees the hole (as DeepFill v2's SN-PatchGAN
    does): [image, mask] [S, S, C + 1] -> a map of logits [S/4, S/4, 1], one per overlapping
    patch of 30 x 30 pixels (two stride-2 and one stride-1 4x4 convolutions, then a 3x3 to
    one logit). The adversarial losses average over the map, so every patch is judged on
    its own texture: blur in a hole is what tells its patches from real ones."""
    size, channels, width = task.size, task.data["channels"], task.model["width"]
    layers, norm = keras.layers, task.model["spectral_norm"]
    x = keras.Input((size, size, channels + 1))
    h = x
    for i, (mult, stride) in enumerate(((1, 2), (2, 2), (4, 1))):
        h = layers.LeakyReLU(0.2)(conv2d(width * mult, 4, stride, f"patch{i}", norm)(h))
    logits = conv2d(1, 3, 1, "out", norm)(h)
    return keras.Model(x, logits, name="discriminator")


def feature_extractor(network):
    """A model with `network`'s inputs and the outputs of its LeakyReLU layers (the hidden
    layers of the built-in discriminators), sharing its weights; None when `network` is not
    a functional model or has no such layer."""
    layers = [layer for layer in network.layers if isinstance(layer, keras.layers.LeakyReLU)]
    if not layers:
        return None
    try:
        return keras.Model(network.inputs, [layer.output for layer in layers])
    except (AttributeError, ValueError):  # a subclassed model has no symbolic graph
        return None


def feature_matching(real_features, fake_features):
    """Feature matching (pix2pixHD, Wang et al. 2018): the sum over layers of the mean
    absolute difference between paired activations.

    Args:
        real_features, fake_features: lists of tensors of the same shapes, one per layer;
            row i of each is the same image, real and completed.

    Returns:
        A float32 scalar.
    """
    if len(real_features) != len(fake_features) or not real_features:
        raise ValueError(
            "feature_matching needs one fake tensor per real one, and at least one. Received: "
            f"{len(real_features)} real, {len(fake_features)} fake"
        )
    return tf.add_n(
        [
            tf.reduce_mean(tf.abs(tf.cast(r, tf.float32) - tf.cast(f, tf.float32)))
            for r, f in zip(real_features, fake_features, strict=True)
        ]
    )


def perceptual_loss(network, real, output):
    """The sum over `network`'s outputs of the mean squared difference between its features
    of `output` and of `real` (held constant), as LaMa's perceptual loss on the generator's
    raw output."""
    real_features = tf.nest.flatten(network(real, training=False))
    fake_features = tf.nest.flatten(network(output, training=False))
    return tf.add_n(
        [
            tf.reduce_mean(tf.square(float32(f) - tf.stop_gradient(float32(r))))
            for r, f in zip(real_features, fake_features, strict=True)
        ]
    )


def discounted(mask, gamma):
    """DeepFill's spatial discount (Yu et al. 2018) for any hole `mask` [B, S, S, 1]:
    gamma ** (d - 1) at a hole pixel whose nearest known pixel is d pixels away (chessboard
    distance; 1 at the hole's edge), 1 elsewhere. For an h x w rectangle off the image's
    border this is max(gamma ** min(i, h - 1 - i), gamma ** min(j, w - 1 - j)) at its pixel
    (i, j): DeepFill's `spatial_discounting_mask`, whose code has h - i and w - j (one step
    more at the far edges). The image's border is not a known pixel."""
    known = 1.0 - mask
    weights = known
    for d in range(1, mask.shape[1]):  # the known region grown by one pixel at a time
        grown = tf.nn.max_pool2d(known, 3, 1, "SAME")
        weights += (grown - known) * gamma ** (d - 1)
        known = grown
    return weights + (1.0 - known)  # no known pixel at all: weight 1


def feathered(mask, feather):
    """Blend weights [B, S, S, 1] of holes `mask`: 1 in the hole, (F + 1 - d) / (F + 1) at
    chessboard distance d <= F from it, 0 further out (the mean of the hole grown by
    0, 1, ..., F pixels, each growth one 3x3 max-pool of the previous)."""
    grown, total = mask, mask
    for _ in range(feather):
        grown = tf.nn.max_pool2d(grown, 3, 1, "SAME")
        total += grown
    return total / float(feather + 1)


def draw_holes(rng, batch_size, size, options, crop):
    """Masks [B, S, S, 1] (1 in the hole) and the top-left corner of a crop around each hole."""
    low = max(1, int(round(options["hole_min"] * size)))
    high = max(low, int(round(options["hole_max"] * size)))
    hw = rng.uniform([batch_size, 2], low, high + 1, dtype=tf.int32)
    corner = tf.cast(rng.uniform([batch_size, 2]) * tf.cast(size - hw + 1, tf.float32), tf.int32)
    corner = tf.minimum(corner, size - hw)
    grid = tf.range(size)
    rows = (grid[None] >= corner[:, :1]) & (grid[None] < corner[:, :1] + hw[:, :1])
    cols = (grid[None] >= corner[:, 1:]) & (grid[None] < corner[:, 1:] + hw[:, 1:])
    mask = tf.cast(rows[:, :, None] & cols[:, None, :], tf.float32)
    if options["strokes"]:
        mask = tf.maximum(mask, draw_strokes(rng, batch_size, size, options["strokes"]))
    centre = corner + hw // 2
    offset = tf.clip_by_value(centre - crop // 2, 0, size - crop)
    return {"mask": mask[..., None], "crop_offset": offset}


def draw_strokes(rng, batch_size, size, count):
    """Free-form masks: `count` thick line segments per image."""
    ends = rng.uniform([batch_size, count, 4]) * size
    width = rng.uniform([batch_size, count, 1, 1], 1.0, max(2.0, size / 10))
    ys, xs = tf.meshgrid(
        tf.range(size, dtype=tf.float32), tf.range(size, dtype=tf.float32), indexing="ij"
    )
    p = tf.stack([ys, xs], -1)[None, None] + 0.5  # [1, 1, S, S, 2]
    a, b = ends[..., None, None, :2], ends[..., None, None, 2:]
    ab = b - a
    t = tf.clip_by_value(
        tf.reduce_sum((p - a) * ab, -1) / tf.maximum(tf.reduce_sum(ab * ab, -1), 1e-6), 0.0, 1.0
    )
    nearest = a + t[..., None] * ab
    distance = tf.norm(p - nearest, axis=-1)
    return tf.cast(tf.reduce_any(distance <= width, axis=1), tf.float32)


def crop_around(images, offsets, crop):
    """Exact `crop`x`crop` pixel crops at integer `offsets` [B, 2] (differentiable; gathers,
    so XLA compiles it too)."""
    steps = tf.range(crop)
    rows = tf.cast(offsets[:, :1], tf.int32) + steps[None]  # [B, crop]
    cols = tf.cast(offsets[:, 1:], tf.int32) + steps[None]
    picked = tf.gather(images, rows, axis=1, batch_dims=1)  # [B, crop, S, C]
    return tf.gather(picked, cols, axis=2, batch_dims=1)
