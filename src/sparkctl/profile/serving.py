"""What one served model is in a profile: its image, weights, engine launch and named layouts (modes).

A single-model profile has one of each at its top level; a fleet (`models:`, profile/fleet.py) has
one set per service. Pure pydantic, like the rest of the schema (docs/profile.md, docs/fleet.md).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from sparkctl.profile.base import (
    DEFAULT_ENGINE,
    ENGINE_KINDS,
    GATEWAY_HELP,
    INTERNAL_PORT_HELP,
    Count,
    Port,
    Strict,
)
from sparkctl.profile.security import ContainerOptions, ImageRef, ModelId, NodeDir, Revision
from sparkctl.profile.values import ArgValue, check_args, check_env, check_log_dir, one_line


class Image(Strict):
    ref: ImageRef | None = Field(None, description="Image reference on the nodes, e.g. sglang-dflash:spark.")
    id: Annotated[
        str | None,
        Field(
            pattern=r"^sha256:[0-9a-f]{64}$",
            description="The image's ID (`docker image inspect -f {{.Id}}`: sha256: and 64 hex digits); "
            "pins what every node runs.",
        ),
    ] = None
    recipe: str | None = Field(None, description="Name of an images/<recipe>/ to build instead of a ref.")

    @model_validator(mode="after")
    def _ref_or_recipe(self) -> Image:
        if bool(self.ref) == bool(self.recipe):
            raise ValueError("set exactly one of image.ref or image.recipe")
        return self


class ModelRef(Strict):
    id: ModelId = Field(description="Hugging Face repo id, e.g. org/name.")
    revision: Revision | None = Field(
        None, description="Commit or branch; pin it so every node serves the same bytes."
    )
    local_dir: str | None = Field(
        None,
        description="config.json + safetensors here, for `fit` planning when the HF cache lacks the model.",
    )


class Model(Strict):
    target: ModelRef = Field(description="The served model.")
    draft: ModelRef | None = Field(
        None, description="DFlash draft model; enables --speculative-algorithm DFLASH."
    )
    hf_cache: NodeDir = Field(
        "~/.cache/huggingface", description="HF cache on every node, mounted as HF_HOME."
    )
    triton_cache: NodeDir = Field(
        "~/.triton", description="Triton kernel cache: keeps warm-up across restarts."
    )


class Secret(Strict):
    """A secret's source. The value is read at execution time and never stored or printed."""

    env: str | None = Field(None, description="Read from this variable of the shell running sparkctl.")
    file: str | None = Field(None, description="A 0400 file present on every node; mounted read-only.")

    @model_validator(mode="after")
    def _one_source(self) -> Secret:
        if bool(self.env) == bool(self.file):
            raise ValueError("set exactly one of env or file")
        return self


class NamedKey(Secret):
    """A key handed to one client (engine.api_keys): counted at the gateway under its name."""

    per_minute: int | None = Field(
        None,
        ge=1,
        description="At most this many requests a minute with this key (429 beyond), at the gateway.",
    )


KEY_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
OPERATOR_KEY_NAME = "sparkctl"  # engine.api_key's name in the gateway's counts


class Engine(Strict):
    kind: Literal[ENGINE_KINDS] = Field(DEFAULT_ENGINE, description="Serving engine (sparkctl.engines).")  # type: ignore[valid-type]
    command: list[str] | None = Field(
        None,
        min_length=1,
        description="The rank's launcher, run in place of the image's ENTRYPOINT/CMD (default: the engine's).",
    )
    host: str | None = Field(
        None,
        description="--host of the API server (default: each node's IP, its name resolved on that node by `up`; "
        "127.0.0.1 for a local node). Without api_key, anything but loopback needs expose: public.",
    )
    expose: Literal["private", "public"] = Field(
        "private", description="public: an API without a key on a non-loopback address is intended."
    )
    api_key: Secret | None = Field(None, description="Bearer key the OpenAI API requires (passed in a file).")
    api_keys: dict[str, NamedKey] = Field(
        default_factory=dict,
        description="Named keys for clients, checked and counted by the gateway (engine.api_key stays the "
        "engine's own, which sparkctl uses); revoke one by removing it and running `sparkctl up`.",
    )
    admin_api_key: Secret | None = Field(
        None, description="Key for the engine's admin routes (SGLang's; else they take api_key, or no key)."
    )
    trust_remote_code: bool = Field(
        False, description="Let the model repo run its own Python (--trust-remote-code); pin the revision."
    )
    offline: bool = Field(
        True, description="HF_HUB_OFFLINE=1 in the container: serve the shipped snapshot, never fetch."
    )
    port: Port = Field(30000, description="--port of the API server (rank 0).")
    gateway: bool = Field(True, validation_alias=AliasChoices("gateway", "front"), description=GATEWAY_HELP)
    internal_port: Port | None = Field(None, description=INTERNAL_PORT_HELP)
    served_model_name: str | None = Field(
        None, description="Name clients use (default: last part of the model id)."
    )
    recipe_defaults: bool = Field(True, description="Add the reference recipe's serving defaults.")
    args: dict[str, ArgValue] = Field(
        default_factory=dict,
        description="The engine's flags without dashes: true = bare flag, false/null = omit, list = values.",
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra container env (no secrets here).")
    secrets: dict[str, Secret] = Field(
        default_factory=dict, description="Secret env such as HF_TOKEN, by source."
    )
    container: ContainerOptions = Field(default_factory=ContainerOptions, description="docker run options.")
    options: dict[str, ArgValue] = Field({}, description="Keys of the engine's own (docs/engines.md).")
    ready_timeout: float = Field(1800.0, gt=0, description="Seconds `up` waits for the endpoint.")
    log_dir: str = Field("~/.local/state/sparkctl/logs", description="Per-node directory of rank log files.")
    stop_grace: int = Field(
        5, ge=0, le=300, description="Seconds between SIGTERM and SIGKILL when `down`/`switch` stop a rank."
    )

    @field_validator("args")
    @classmethod
    def _args(cls, v: dict[str, ArgValue]) -> dict[str, ArgValue]:
        return check_args(v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return check_env(v)

    @field_validator("log_dir")
    @classmethod
    def _log_dir(cls, v: str) -> str:
        return check_log_dir(v)

    @field_validator("served_model_name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        return v if v is None else one_line("served_model_name", v)

    @field_validator("api_keys")
    @classmethod
    def _key_names(cls, v: dict[str, NamedKey]) -> dict[str, NamedKey]:
        for name in v:
            if not KEY_NAME.match(name) or name == OPERATOR_KEY_NAME:
                raise ValueError(
                    f"api_keys: {name!r} is not a key name: 1-32 of a-z, 0-9, _ and -, starting with a "
                    f"letter or digit, not {OPERATOR_KEY_NAME!r} (engine.api_key's name)"
                )
        return v

    @model_validator(mode="after")
    def _named_keys_need_the_gateway(self) -> Engine:
        if self.api_keys and self.api_key is None:
            raise ValueError(
                "api_keys: set api_key too: it is the engine's own key, which sparkctl uses (readiness, "
                "verify, status, the router); the named keys are the ones you hand out"
            )
        if self.api_keys and not self.gateway:
            raise ValueError(
                "api_keys: the gateway checks named keys (the engine knows one): set gateway: true"
            )
        return self

    @model_validator(mode="after")
    def _admin_needs_api_key(self) -> Engine:
        # Only an admin key: normal routes stay open, the settings route (which answers it) among them.
        if self.admin_api_key is not None and self.api_key is None:
            raise ValueError(
                "admin_api_key: set api_key too (with only an admin key the API is open and "
                "/server_info hands that admin key to anyone)"
            )
        return self


class Mode(Strict):
    nodes: list[str] = Field(
        min_length=1,
        description="Node names, cut in order into replica groups; a group's first is its rank 0.",
    )
    tp: Count = Field(1, ge=1, description="Tensor parallel size of one replica, over its nodes.")
    pp: Count = Field(1, ge=1, description="Pipeline parallel size of one replica.")
    replicas: Count = Field(
        1,
        ge=1,
        description="Independent copies of the model behind the router (data parallel): "
        "nodes split into this many groups, or several per node on its GPUs.",
    )
    gpu_ids: list[Annotated[int, Field(ge=0)]] | None = Field(
        None,
        min_length=1,
        description="The GPUs of each of its nodes the mode's ranks use, in order (default: all, from "
        "GPU 0): services of a fleet on different GPUs of one box.",
    )
    args: dict[str, ArgValue] = Field(default_factory=dict, description="Flags merged over engine.args.")
    env: dict[str, str] = Field(default_factory=dict, description="Env merged over engine.env.")
    default: bool = Field(False, description="The mode used when a command names none.")

    @field_validator("args")
    @classmethod
    def _args(cls, v: dict[str, ArgValue]) -> dict[str, ArgValue]:
        return check_args(v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return check_env(v)

    @property
    def nodes_per_replica(self) -> int:
        """Nodes one replica spans (1 when replicas share or split single nodes)."""
        return max(1, len(self.nodes) // self.replicas)
