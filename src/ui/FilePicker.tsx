import { useRef, type ReactNode } from 'react';

/**
 * A file (or folder) picker that Tab reaches and Enter/Space opens: a real button that clicks a
 * hidden <input type=file> (a label around a hidden input is skipped by the keyboard). The input
 * keeps the test id, so tests can still set its files directly.
 */
export function FilePicker({ children, testId, accept, multiple, folder, disabled, className, title, onFiles }: {
  children: ReactNode;
  testId: string;
  accept?: string;
  multiple?: boolean;
  folder?: boolean;
  disabled?: boolean;
  className?: string;
  title?: string;
  onFiles(files: File[]): void;
}) {
  const input = useRef<HTMLInputElement>(null);
  return (
    <>
      <button type="button" className={className} data-testid={`${testId}-button`} disabled={disabled} title={title} onClick={() => input.current?.click()}>
        {children}
      </button>
      <input ref={input} type="file" hidden tabIndex={-1} aria-hidden="true" data-testid={testId} accept={accept} multiple={multiple} disabled={disabled}
        {...(folder ? { webkitdirectory: '' } : {})}
        onChange={(e) => { onFiles([...(e.target.files ?? [])]); e.target.value = ''; }} />
    </>
  );
}
