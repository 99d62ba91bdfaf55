"""Build the local cluster's container images without a registry, each cached by its content.

Every image is a recipe: its inputs (recipe files, the sources it copies, versions, build
arguments and the key of the image it starts from) hash to a key. An image whose recorded key
equals the new key (and whose archive is on disk) is not built again, so a second run builds
nothing. Images that nodes run are saved as docker-archive tarballs and listed in
``$ELASTICJOB_CACHE/images/index.json`` (the image contract in docs/packaging.md):
``[{"ref": ..., "archive": ..., "id": "sha256:<image config digest>"}]``, replaced atomically.

Standard library only: ``localcluster/images/build.sh`` runs it (``python3 -m imagebuild``) with
the system Python after installing podman, runc, mmdebstrap and the rest from Debian.

Modules, each importing only the ones before it: ``cache`` (paths, content keys, the index and
each image's recorded key), ``tools`` (the command runner, podman, Go and gcc; the recipes'
``Context``), ``recipes`` (one per image) and ``cli`` (the driver and the command line).
"""

from .cache import Paths, put_index_entry, recipe_key
from .cli import ensure, key_of, main
from .recipes import RECIPES, Recipe
from .tools import Context

__all__ = [
    "RECIPES",
    "Context",
    "Paths",
    "Recipe",
    "ensure",
    "key_of",
    "main",
    "put_index_entry",
    "recipe_key",
]
