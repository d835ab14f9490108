export * from './allreduce';
export * from './crc32';
export * from './framing';
export * from './group';
export * from './limiter';
export * from './loopback';
export * from './transport';
