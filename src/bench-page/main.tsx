/** Entry of bench.html: the benchmark page, React on top of a bench worker (src/bench-page/bench.worker.ts). */
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import '../ui/lab.css';
import './bench.css';
import { BenchApp } from './BenchApp';

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <BenchApp />
  </StrictMode>,
);
