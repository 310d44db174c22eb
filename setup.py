"""rembert-t5x: RemBERT (Chung et al., ICLR 2021) as a T5X/SeqIO plugin."""

import setuptools

# Versions verified to install and work together (see README "Install").
INSTALL_REQUIRES = [
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "flax==0.12.8",
    "optax>=0.2.4",
    "orbax-checkpoint>=0.11",
    "clu>=0.0.12",
    "seqio==0.0.20",
    "gin-config>=0.5.0",
    "tensorflow>=2.21,<2.22",
    "tensorflow-text==2.21.1",
    "tensorflow-datasets==4.9.10",
    "sentencepiece>=0.2.0",
    "numpy",
    "absl-py",
    "seqeval>=1.2.2",
    "matplotlib",
    "tqdm",
    "tensorboard",
]

EXTRAS_REQUIRE = {
    # torch 2.13.0 resolves to the CPU wheel; a looser spec can pull a CUDA build.
    "test": [
        "pytest>=8",
        "torch==2.13.0",
        "transformers>=4.40",
        "safetensors",
    ],
    # T5X is not on PyPI; it installs from its git repository.
    "t5x": ["t5x @ git+https://github.com/google-research/t5x"],
}

setuptools.setup(
    name="rembert-t5x",
    version="0.1.0",
    description="RemBERT (decoupled input/output embeddings) for T5X and SeqIO.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=["rembert_t5x", "rembert_tasks"],
    # `tasks/` is installed under a unique import name so it cannot collide
    # with other packages called `tasks`.
    package_dir={"rembert_t5x": "rembert_t5x", "rembert_tasks": "tasks"},
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
)
