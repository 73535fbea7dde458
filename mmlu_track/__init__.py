"""mmlu_track: MMLU evaluation, tracking and release gating.

Data flows one way: eval (config -> data -> prompts -> model -> answers) -> store (a typed run
record -> SQL, MLflow) -> gate (statistics -> policy -> report), over a floor of typed records;
the pipeline orchestrates eval and store, the CLI (`cli.py`) sits on top. docs/architecture.md
has the map; a glossary of the names that carry it:

- `EvalConfig` (config.py): the typed, frozen settings of one evaluation; Hydra stops at cli.py.
- `Prepared` (pipeline/prepare.py): a run before it is recorded: plan, rendered prompts, backend,
  `RunStart` and identity.
- `EvaluationSession` (pipeline/session.py): one process's part of one run, its steps as methods.
- `RunRecorder` (store/recorder.py): the session's one contact with persistence: the SQL store
  (source of truth) and the run's MLflow run (its mirror).
- `Backend` (eval/backend.py): a model as the pipeline sees it; it answers `LetterRequest`s
  (`score_letters`, logprob scoring) and `GenerationRequest`s (`generate`) with a `Score` each
  (the model's raw outcome for one prompt).
- `answers` (eval/answers.py): how a `Score` becomes a predicted letter (argmax after
  calibration, or the letter read from a generation) in a `QuestionResult`.
- `Accuracy` / `Accuracies` (records/results.py): one group's accuracy with its interval; a run's
  per-subject, category, macro and micro accuracies (`aggregate`).
- `EvalProtocol` (records/run.py): what two runs must share to be compared question by question;
  `identity.RESULT_NEUTRAL`: the settings that change no result.
- `RunRecord` (records/run.py): a finished run as results.json, the SQL store and MLflow hold it;
  `StoredRun` (records/stored.py): a run as read back from the SQL store.
- `Comparison`, `Verdict`, `Outcome` (gate/): the paired statistics of two runs, the policy's
  decision (`policy.decide`; the sequential gate's `sequential.decide_looks`), and both together
  as published (`gate/publish.py`: rendered files, then `record_verdict`).
"""
