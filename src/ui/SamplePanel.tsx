/** Generated text of a run: the latest sample, earlier ones folded. */
export function SamplePanel({ samples }: { samples: { step: number; text: string }[] }) {
  const last = samples.at(-1);
  if (!last) return null;
  const earlier = samples.slice(0, -1).reverse();
  return (
    <section className="sample">
      <h3>Sample after step {last.step + 1}</h3>
      <pre data-testid="sample">{last.text}</pre>
      {earlier.length > 0 && (
        <details>
          <summary>{earlier.length} earlier sample{earlier.length > 1 ? 's' : ''}</summary>
          {earlier.map((s) => (
            <div key={s.step}>
              <h4>after step {s.step + 1}</h4>
              <pre>{s.text}</pre>
            </div>
          ))}
        </details>
      )}
    </section>
  );
}
