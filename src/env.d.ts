/// <reference types="vite/client" />
declare module '*.wgsl?raw' {
  const source: string;
  export default source;
}
// node-turn (tests only) ships no types: the constructor options and start/stop the tests use.
declare module 'node-turn' {
  export default class TurnServer {
    constructor(config: Record<string, unknown>);
    start(): void;
    stop(): void;
  }
}
