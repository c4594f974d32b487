"""Whether a Docker engine and the sandbox image are there, and the commands that fix it."""

from __future__ import annotations

__all__ = ["BUILD_HINT", "ENGINE_HINT", "IMAGE", "docker_unavailable"]

IMAGE = "multiturn-envs-sandbox:latest"
BUILD_HINT = "multiturn-envs sandbox build"
ENGINE_HINT = "scripts/ensure_docker.sh"


def docker_unavailable(image: str = IMAGE) -> str | None:
    """Why the docker backend cannot run here (with the command that fixes it), or ``None``."""
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed (pip install 'multiturn-envs[docker]')"
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:
        return f"no Docker engine answers ({type(exc).__name__}); start one: {ENGINE_HINT}"
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return f"the sandbox image {image} is missing; build it: {BUILD_HINT}"
    except Exception as exc:
        return f"cannot inspect the image {image} ({exc})"
    finally:
        client.close()
    return None
