"""Which clusters' conditioning outweighs the latent in a self-conditioned generator.

    python benchmarks/conditioning.py RUN [RUN ...]          # eval's json read from RUN.eval.json
                                                              # if there, else `eval` is run

For a run of `dcgan_clusters` (or any `model.conditional` DCGAN run), the generator's first
layer (`project`) takes [z, embed(c)]: its kernel's rows for z (`W_z`) and for the embedding
(`W_e`). For each cluster c, `weight` = ||W_e^T embed(c)|| / ||W_z||_F: how far the cluster's
embedding moves the first layer's input against how far a latent z ~ N(0, I) moves it (in
expectation, ||W_z^T z|| is about ||W_z||_F). A cluster whose `weight` is large gets most of
its first-layer input from the cluster, little from z, and can ignore z: one picture a
cluster. The same is read for the discriminator's projection (`embed(c)`'s norm), and both
are set against `eval`'s per-cluster diversity (`diversity/clusterNN`): the least varied
cluster's rank among the 20, and the rank correlation over all of them.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import yaml
from common import stagegan  # sets TF_CPP_MIN_LOG_LEVEL before TensorFlow is imported


def ranks(values):
    """0-based ranks of `values` (ties in order: enough for 20 continuous numbers)."""
    order = np.argsort(values)
    out = np.empty(len(values))
    out[order] = np.arange(len(values))
    return out


def spearman(a, b):
    """Spearman's rank correlation of two sequences."""
    return float(np.corrcoef(ranks(a), ranks(b))[0, 1])


def weights(run):
    """`(generator weight per cluster, discriminator projection norm per cluster)` from the
    run's newest checkpoint."""
    import tensorflow as tf

    from stagegan.runfolder.dirs import RunFolder

    folder = RunFolder(run)
    store = folder.checkpoints()  # the run's own index: its newest checkpoint
    newest = store.latest()
    if newest is None:
        sys.exit(f"conditioning.py: {run}: no checkpoint")
    path = store.path_of(newest)
    reader = tf.train.load_checkpoint(path)

    def read(name):
        return reader.get_tensor(f"{name}/.ATTRIBUTES/VARIABLE_VALUE")

    embedded = read("generator:embed:embeddings")  # [clusters, latent]
    kernel = read("generator:project:kernel")  # [latent + latent, 4 * 4 * channels]
    latent = embedded.shape[1]
    config = yaml.safe_load(folder.config_file().read_text())
    if config["model"].get("embed_norm"):  # the rows the first layer sees: length sqrt(latent)
        embedded = embedded / np.linalg.norm(embedded, axis=1, keepdims=True) * latent**0.5
    w_z, w_e = kernel[:latent], kernel[latent:]
    generator = np.linalg.norm(embedded @ w_e, axis=1) / np.linalg.norm(w_z)
    projection = np.linalg.norm(read("discriminator:embed:embeddings"), axis=1)
    return generator, projection


def diversity(run):
    """`eval`'s per-cluster diversity: RUN.eval.json beside the run if there, else eval."""
    saved = run.parent / f"{run.name}.eval.json"
    if saved.exists():
        metrics = json.loads(saved.read_text())["metrics"]
    else:
        out = stagegan("eval", "--run", str(run), "--json", "--features", "selfsup",
                       "--count", "2000")  # fmt: skip
        metrics = json.loads(out)["metrics"]
    names = sorted(k for k in metrics if k.startswith("diversity/"))
    return [k.split("/", 1)[1] for k in names], np.array([metrics[k] for k in names])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+")
    for run in parser.parse_args().runs:
        generator, projection = weights(run)
        names, varied = diversity(run)
        worst = int(np.argmin(varied))
        print(json.dumps({
            "run": str(run),
            "least_varied": names[worst],
            "its_diversity": round(float(varied[worst]), 3),
            "its_weight": round(float(generator[worst]), 2),
            "median_weight": round(float(np.median(generator)), 2),
            "its_weight_rank": int((generator > generator[worst]).sum()) + 1,  # 1: the largest
            "rho_weight_diversity": round(spearman(generator, varied), 2),
            "its_projection_rank": int((projection > projection[worst]).sum()) + 1,
            "rho_projection_diversity": round(spearman(projection, varied), 2),
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
