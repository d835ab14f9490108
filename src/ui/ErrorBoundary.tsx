import { Component, type ErrorInfo, type ReactNode } from 'react';

interface State {
  error: Error | null;
}

/** A render error in one panel shows as a message in that panel instead of blanking the page. */
export class ErrorBoundary extends Component<{ children: ReactNode; where: string }, State> {
  override state: State = { error: null };

  static getDerivedStateFromError(error: Error): State {
    return { error };
  }

  override componentDidCatch(error: Error, info: ErrorInfo): void {
    console.error(`render error in ${this.props.where}:`, error, info.componentStack);
  }

  override render() {
    if (!this.state.error) return this.props.children;
    return (
      <div className="error" role="alert" data-testid="render-error">
        <b>Something went wrong showing the {this.props.where}:</b> {this.state.error.message}{' '}
        <button type="button" onClick={() => this.setState({ error: null })}>
          Retry
        </button>
      </div>
    );
  }
}
