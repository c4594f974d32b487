"""The reference harness and its stable API.

Import what you use from here (``from multiturn_envs.harness import run_eval, read_run``): the
submodules may move, these names stay. Each is imported on first use, so ``import
multiturn_envs.harness`` is cheap. The layers (docs/architecture.md): :mod:`.records` (the
typed schema and the crash-safe writer), :mod:`.config`, :mod:`.replay` (the one way to rebuild
an episode from a record), :mod:`.runner` / :mod:`.executors` / :mod:`.rollout` (running),
:mod:`.passk` / :mod:`.bootstrap` (estimators and intervals), and the analyses
(:mod:`.same_state`, :mod:`.continuation`, :mod:`.likelihood`, :mod:`.dynamics`,
:mod:`.report`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from multiturn_envs.lazy import lazy_exports

if TYPE_CHECKING:
    from multiturn_envs.harness.bootstrap import (
        DEFAULT_N_BOOT as DEFAULT_N_BOOT,
    )
    from multiturn_envs.harness.bootstrap import (
        BootstrapCI as BootstrapCI,
    )
    from multiturn_envs.harness.bootstrap import (
        Interval as Interval,
    )
    from multiturn_envs.harness.bootstrap import (
        PairedBootstrapCI as PairedBootstrapCI,
    )
    from multiturn_envs.harness.bootstrap import (
        bootstrap_ci as bootstrap_ci,
    )
    from multiturn_envs.harness.bootstrap import (
        paired_bootstrap_ci as paired_bootstrap_ci,
    )
    from multiturn_envs.harness.bootstrap import (
        paired_surface_ci as paired_surface_ci,
    )
    from multiturn_envs.harness.bootstrap import (
        ratio_interval as ratio_interval,
    )
    from multiturn_envs.harness.bootstrap import (
        surface_ci as surface_ci,
    )
    from multiturn_envs.harness.config import (
        EpisodeSeeds as EpisodeSeeds,
    )
    from multiturn_envs.harness.config import (
        EvalConfig as EvalConfig,
    )
    from multiturn_envs.harness.config import (
        RunOptions as RunOptions,
    )
    from multiturn_envs.harness.config import (
        RunSummary as RunSummary,
    )
    from multiturn_envs.harness.config import (
        episode_seeds as episode_seeds,
    )
    from multiturn_envs.harness.continuation import (
        ContinuationResult as ContinuationResult,
    )
    from multiturn_envs.harness.continuation import (
        continuation_difference as continuation_difference,
    )
    from multiturn_envs.harness.continuation import (
        error_state_continuation as error_state_continuation,
    )
    from multiturn_envs.harness.dynamics import (
        CheckpointPoint as CheckpointPoint,
    )
    from multiturn_envs.harness.dynamics import (
        DynamicsResult as DynamicsResult,
    )
    from multiturn_envs.harness.dynamics import (
        plot_dynamics as plot_dynamics,
    )
    from multiturn_envs.harness.dynamics import (
        training_dynamics as training_dynamics,
    )
    from multiturn_envs.harness.executors import (
        Executor as Executor,
    )
    from multiturn_envs.harness.executors import (
        LocalExecutor as LocalExecutor,
    )
    from multiturn_envs.harness.likelihood import (
        LLRSummary as LLRSummary,
    )
    from multiturn_envs.harness.likelihood import (
        LLRTrajectory as LLRTrajectory,
    )
    from multiturn_envs.harness.likelihood import (
        NLLSummary as NLLSummary,
    )
    from multiturn_envs.harness.likelihood import (
        ScoredTrajectory as ScoredTrajectory,
    )
    from multiturn_envs.harness.likelihood import (
        action_nll as action_nll,
    )
    from multiturn_envs.harness.likelihood import (
        ensure_comparable as ensure_comparable,
    )
    from multiturn_envs.harness.likelihood import (
        env_factory_of as env_factory_of,
    )
    from multiturn_envs.harness.likelihood import (
        format_llr as format_llr,
    )
    from multiturn_envs.harness.likelihood import (
        format_nll as format_nll,
    )
    from multiturn_envs.harness.likelihood import (
        llr_pairs as llr_pairs,
    )
    from multiturn_envs.harness.likelihood import (
        pair_llr as pair_llr,
    )
    from multiturn_envs.harness.likelihood import (
        replay_trajectories as replay_trajectories,
    )
    from multiturn_envs.harness.likelihood import (
        run_label as run_label,
    )
    from multiturn_envs.harness.likelihood import (
        score_generated as score_generated,
    )
    from multiturn_envs.harness.likelihood import (
        score_run as score_run,
    )
    from multiturn_envs.harness.likelihood import (
        trajectory_llr as trajectory_llr,
    )
    from multiturn_envs.harness.passk import (
        PassSurface as PassSurface,
    )
    from multiturn_envs.harness.passk import (
        pass_at_k as pass_at_k,
    )
    from multiturn_envs.harness.passk import (
        pass_at_k_table as pass_at_k_table,
    )
    from multiturn_envs.harness.passk import (
        pass_surface_from_first_success as pass_surface_from_first_success,
    )
    from multiturn_envs.harness.passk import (
        pass_surface_per_budget as pass_surface_per_budget,
    )
    from multiturn_envs.harness.ray_executor import (
        ClusterRunSummary as ClusterRunSummary,
    )
    from multiturn_envs.harness.ray_executor import (
        RayExecutor as RayExecutor,
    )
    from multiturn_envs.harness.records import (
        SCHEMA_VERSION as SCHEMA_VERSION,
    )
    from multiturn_envs.harness.records import (
        RecordWriter as RecordWriter,
    )
    from multiturn_envs.harness.records import (
        RunConfig as RunConfig,
    )
    from multiturn_envs.harness.records import (
        RunFile as RunFile,
    )
    from multiturn_envs.harness.records import (
        RunHeader as RunHeader,
    )
    from multiturn_envs.harness.records import (
        TrajectoryRecord as TrajectoryRecord,
    )
    from multiturn_envs.harness.records import (
        in_task_order as in_task_order,
    )
    from multiturn_envs.harness.records import (
        iter_lines as iter_lines,
    )
    from multiturn_envs.harness.records import (
        read_header as read_header,
    )
    from multiturn_envs.harness.records import (
        read_run as read_run,
    )
    from multiturn_envs.harness.records import (
        record_key as record_key,
    )
    from multiturn_envs.harness.replay import (
        EnvFactory as EnvFactory,
    )
    from multiturn_envs.harness.replay import (
        EpisodeReplay as EpisodeReplay,
    )
    from multiturn_envs.harness.replay import (
        Replay as Replay,
    )
    from multiturn_envs.harness.replay import (
        budget_stack as budget_stack,
    )
    from multiturn_envs.harness.report import (
        main_report as main_report,
    )
    from multiturn_envs.harness.report import (
        surface_of_run as surface_of_run,
    )
    from multiturn_envs.harness.rollout import (
        eval_records as eval_records,
    )
    from multiturn_envs.harness.rollout import (
        run_eval as run_eval,
    )
    from multiturn_envs.harness.same_state import (
        ComparisonResult as ComparisonResult,
    )
    from multiturn_envs.harness.same_state import (
        StateComparison as StateComparison,
    )
    from multiturn_envs.harness.same_state import (
        StateSnapshot as StateSnapshot,
    )
    from multiturn_envs.harness.same_state import (
        same_state_comparison as same_state_comparison,
    )
    from multiturn_envs.harness.same_state import (
        states_from_records as states_from_records,
    )

# name -> the submodule that defines it (imported on first use, so that importing this
# package stays light and a move inside it changes only this table)
_EXPORTS: dict[str, str] = {
    "EvalConfig": "config",
    "RunSummary": "config",
    "RunOptions": "config",
    "EpisodeSeeds": "config",
    "episode_seeds": "config",
    "run_eval": "rollout",
    "eval_records": "rollout",
    "Executor": "executors",
    "LocalExecutor": "executors",
    "RayExecutor": "ray_executor",
    "ClusterRunSummary": "ray_executor",
    "RunFile": "records",
    "RunHeader": "records",
    "RunConfig": "records",
    "TrajectoryRecord": "records",
    "RecordWriter": "records",
    "read_run": "records",
    "read_header": "records",
    "iter_lines": "records",
    "in_task_order": "records",
    "record_key": "records",
    "SCHEMA_VERSION": "records",
    "Replay": "replay",
    "EpisodeReplay": "replay",
    "budget_stack": "replay",
    "EnvFactory": "replay",
    "PassSurface": "passk",
    "pass_at_k": "passk",
    "pass_at_k_table": "passk",
    "pass_surface_from_first_success": "passk",
    "pass_surface_per_budget": "passk",
    "BootstrapCI": "bootstrap",
    "PairedBootstrapCI": "bootstrap",
    "Interval": "bootstrap",
    "DEFAULT_N_BOOT": "bootstrap",
    "bootstrap_ci": "bootstrap",
    "paired_bootstrap_ci": "bootstrap",
    "surface_ci": "bootstrap",
    "paired_surface_ci": "bootstrap",
    "ratio_interval": "bootstrap",
    "StateSnapshot": "same_state",
    "StateComparison": "same_state",
    "ComparisonResult": "same_state",
    "same_state_comparison": "same_state",
    "states_from_records": "same_state",
    "ContinuationResult": "continuation",
    "error_state_continuation": "continuation",
    "continuation_difference": "continuation",
    "ScoredTrajectory": "likelihood",
    "NLLSummary": "likelihood",
    "LLRSummary": "likelihood",
    "LLRTrajectory": "likelihood",
    "action_nll": "likelihood",
    "trajectory_llr": "likelihood",
    "pair_llr": "likelihood",
    "llr_pairs": "likelihood",
    "score_run": "likelihood",
    "score_generated": "likelihood",
    "replay_trajectories": "likelihood",
    "ensure_comparable": "likelihood",
    "env_factory_of": "likelihood",
    "format_nll": "likelihood",
    "format_llr": "likelihood",
    "run_label": "likelihood",
    "DynamicsResult": "dynamics",
    "CheckpointPoint": "dynamics",
    "training_dynamics": "dynamics",
    "plot_dynamics": "dynamics",
    "main_report": "report",
    "surface_of_run": "report",
}

__all__ = [
    "DEFAULT_N_BOOT",
    "SCHEMA_VERSION",
    "BootstrapCI",
    "CheckpointPoint",
    "ClusterRunSummary",
    "ComparisonResult",
    "ContinuationResult",
    "DynamicsResult",
    "EnvFactory",
    "EpisodeReplay",
    "EpisodeSeeds",
    "EvalConfig",
    "Executor",
    "Interval",
    "LLRSummary",
    "LLRTrajectory",
    "LocalExecutor",
    "NLLSummary",
    "PairedBootstrapCI",
    "PassSurface",
    "RayExecutor",
    "RecordWriter",
    "Replay",
    "RunConfig",
    "RunFile",
    "RunHeader",
    "RunOptions",
    "RunSummary",
    "ScoredTrajectory",
    "StateComparison",
    "StateSnapshot",
    "TrajectoryRecord",
    "action_nll",
    "bootstrap_ci",
    "budget_stack",
    "continuation_difference",
    "ensure_comparable",
    "env_factory_of",
    "episode_seeds",
    "error_state_continuation",
    "eval_records",
    "format_llr",
    "format_nll",
    "in_task_order",
    "iter_lines",
    "llr_pairs",
    "main_report",
    "pair_llr",
    "paired_bootstrap_ci",
    "paired_surface_ci",
    "pass_at_k",
    "pass_at_k_table",
    "pass_surface_from_first_success",
    "pass_surface_per_budget",
    "plot_dynamics",
    "ratio_interval",
    "read_header",
    "read_run",
    "record_key",
    "replay_trajectories",
    "run_eval",
    "run_label",
    "same_state_comparison",
    "score_generated",
    "score_run",
    "states_from_records",
    "surface_ci",
    "surface_of_run",
    "training_dynamics",
    "trajectory_llr",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
