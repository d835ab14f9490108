import { useEffect, useState } from 'react';

interface Props {
  label: string;
  testId: string;
  value: number | undefined;
  onChange(v: number | undefined): void;
  /** Integer-only fields reject fractions. */
  integer?: boolean;
  min?: number;
  step?: number | 'any';
  /** Shown when empty; an empty field means "default" only where `optional` is set. */
  placeholder?: string;
  optional?: boolean;
  disabled?: boolean;
}

/** A numeric input that keeps its own text, so partial input ("0.", "") is not clobbered. */
export function NumberField({ label, testId, value, onChange, integer, min, step, placeholder, optional, disabled }: Props) {
  const [text, setText] = useState(value === undefined ? '' : String(value));
  useEffect(() => {
    setText((t) => (Number(t) === value && t !== '' ? t : value === undefined ? '' : String(value)));
  }, [value]);

  const commit = (t: string) => {
    setText(t);
    if (t.trim() === '') {
      if (optional) onChange(undefined);
      return;
    }
    const v = Number(t);
    if (Number.isFinite(v) && (!integer || Number.isInteger(v))) onChange(v);
  };

  return (
    <label className="field">
      <span>{label}</span>
      <input
        type="number"
        data-testid={testId}
        value={text}
        min={min}
        step={step ?? (integer ? 1 : 'any')}
        placeholder={placeholder}
        disabled={disabled}
        onChange={(e) => commit(e.target.value)}
      />
    </label>
  );
}
