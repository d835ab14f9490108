import { useLab, useLabApi } from './context';

/** Errors that belong to no run (uncaught exceptions, invalid settings). */
export function AppErrors() {
  const { store } = useLabApi();
  const errors = useLab((s) => s.appErrors);
  if (errors.length === 0) return null;
  return (
    <div className="error" role="alert" data-testid="app-errors">
      {errors.map((e, i) => (
        <p key={i}>{e}</p>
      ))}
      <button type="button" onClick={() => store.getState().dismissAppErrors()}>
        Dismiss
      </button>
    </div>
  );
}
